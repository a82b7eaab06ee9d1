"""`coworker backup DEST` and `coworker restore-backup SRC`: the whole coworker, copied and back.

A backup is a new folder (0700, every file in it 0600) holding:

    coworker.db      the whole database (events, archive, ladder, pins, promotions, ...), taken
                     through SQLite's online backup API, so a running loop is neither stopped
                     nor half-copied; checked with PRAGMA integrity_check before it is reported
    MEMORY.md        as it was just after the database was copied
    snapshots/       state/snapshots/: every saved version of MEMORY.md
    memory-map.md    state/memory-map.md
    manifest.json    what, when, from where, event counts, and each file's size and sha256

Not in it: config.toml (yours, usually in git), state/secrets.toml (a key does not belong in a
folder that gets carried around), logs, run.json, the inbox and outbox.

`restore` brings a backup back into a stopped home: it checks the backup first (every file
against the manifest, the database with integrity_check), holds the pidfile lock while it works
so no loop starts meanwhile, and moves what it replaces (the database with its -wal and -shm,
MEMORY.md, snapshots/, memory-map.md) aside into state/before-restore-<time>/: nothing is lost.
When the database moved aside holds the same history, it is read (its content unchanged) for
what came after the backup (`Since`): inputs it answered are marked answered, and messages told
after the backup that were still waiting are told again. The restored database then records
one `backup_restored` event.

Errors are CoworkerErrors: UsageError (exit 2) for a path that cannot be a backup or a
destination, BackupRefused (exit 1) for a refusal (a folder that is not empty, a running
coworker, a backup that does not check out). Nothing here prints; each report has a `line()`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, process
from .errors import AlreadyRunning, CoworkerError, UsageError
from .home import PRIVATE_DIR, PRIVATE_FILE, Home

if TYPE_CHECKING:
    from .store import Store

MANIFEST = "manifest.json"
DB_NAME = "coworker.db"
MEMORY_NAME = "MEMORY.md"
SNAPSHOTS = "snapshots"
MAP_NAME = "memory-map.md"
FORMAT = 1
WHAT = "coworker backup"
NOT_INCLUDED = ["config.toml", "state/secrets.toml", "logs", "state/run.json", "state/inbox/",
                "state/outbox/"]
ASIDE_PREFIX = "before-restore-"


class BackupRefused(CoworkerError):
    """A backup or restore that would overwrite something, or could not be trusted; exit 1."""


@dataclass(frozen=True)
class BackupReport:
    dest: Path
    taken_at: str
    counts: dict[str, int]
    last_event_id: int
    integrity: str
    files: list[str] = field(default_factory=list)  # relative to dest, manifest not included

    @property
    def snapshots(self) -> int:
        return sum(1 for f in self.files if f.startswith(f"{SNAPSHOTS}/") and f.endswith(".md"))

    def line(self) -> str:
        c = self.counts
        extra = [MEMORY_NAME] if MEMORY_NAME in self.files else []
        extra.append(_n(self.snapshots, "MEMORY.md snapshot"))
        if MAP_NAME in self.files:
            extra.append("the memory map")
        return (f"backup taken in {self.dest}: the database "
                f"({_n(c['events'] + c['events_archive'], 'event')}, {_n(c['rollups'], 'rollup')}, "
                f"{_n(c['pins'], 'pin')}; integrity {self.integrity}), {', '.join(extra)}; "
                f"{MANIFEST} says what and when")


@dataclass(frozen=True)
class RestoreReport:
    src: Path
    taken_at: str
    counts: dict[str, int]
    aside: Path
    moved_aside: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    since: Since | None = None  # what the database moved aside holds past the backup

    def line(self) -> str:
        c = self.counts
        kept = (f"what was here before is in {self.aside}" if self.moved_aside else
                f"nothing was here to move aside (the folder {self.aside} is empty)")
        since = f"; {self.since.line(self.aside)}" if self.since and self.since.line(
            self.aside) else ""
        return (f"restored the backup taken {self.taken_at} from {self.src} "
                f"({_n(c['events'] + c['events_archive'], 'event')}, {_n(c['pins'], 'pin')}, "
                f"{_n(len(self.restored), 'file')}); {kept}{since}; `coworker start` runs it")


@dataclass
class Since:
    """What the database moved aside says of the time after the backup: inputs it had
    answered (marked answered here, so nothing is answered twice) or set aside (set aside
    here too), messages told after the backup that were not answered (told again here, so
    none is lost; a set-aside one set aside again), messages told after it that were answered
    then (only in the aside database), or why it could not be read."""

    answered: int = 0
    told_again: list[int] = field(default_factory=list)
    set_aside: int = 0
    answered_after: int = 0
    unread: str | None = None

    def line(self, aside: Path) -> str:
        if self.unread:
            return (f"the database moved aside could not be read ({self.unread}): messages told "
                    "after the backup may be only there")
        parts = []
        if self.answered:
            parts.append(f"{_n(self.answered, 'message')} answered since the backup "
                         f"{_verb(self.answered, 'stays', 'stay')} answered")
        if again := len(self.told_again):
            parts.append(f"{_n(again, 'message')} told after the backup and still waiting "
                         f"{_verb(again, 'is', 'are')} told again (event "
                         f"{', '.join(map(str, self.told_again))})")
        if self.set_aside:
            parts.append(f"{_n(self.set_aside, 'input')} set aside there "
                         f"{_verb(self.set_aside, 'stays', 'stay')} set aside "
                         "(`coworker retry` puts it back)")
        if self.answered_after:
            parts.append(f"{_n(self.answered_after, 'message')} told and answered after the "
                         f"backup {_verb(self.answered_after, 'is', 'are')} only in "
                         f"{aside / DB_NAME}")
        return "; ".join(parts)


# --- taking a backup -------------------------------------------------------------------------

def take(home: Home, dest: str | os.PathLike[str]) -> BackupReport:
    """Copy the coworker in `home` into the new folder `dest`; safe while the loop runs."""
    from .store import Store

    target = _absolute(dest)
    if target.exists():
        if not target.is_dir():
            raise UsageError(f"{target} exists and is not a folder: give a new folder for the "
                             "backup, e.g. coworker backup ~/coworker-backups/$(date +%F)")
        if any(target.iterdir()):
            raise BackupRefused(f"{target} is not empty: a backup goes into a new (or empty) "
                                "folder and never overwrites one; give another path")
    if _inside(target, home.state):
        raise UsageError(f"{target} is inside the coworker's state/: put the backup outside it "
                         "(another disk is best)")
    if not home.db_path.exists():
        raise BackupRefused(f"nothing to back up in {home.root}: no database at {home.db_path} "
                            "yet (the coworker creates it when it first runs)")
    try:
        target.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        os.chmod(target, PRIVATE_DIR)
    except OSError as e:
        raise UsageError(f"cannot create the backup folder {target} ({e.strerror}): give a "
                         "path you can write") from e

    taken_at = _now()
    db_copy = target / DB_NAME
    try:
        with Store.open(home.db_path, migrate=False) as store:
            store.backup_to(db_copy)
    except sqlite3.Error as e:
        raise CoworkerError(f"could not copy the database {home.db_path} into {target} ({e}); "
                            "`coworker doctor` checks the database") from e
    files = [DB_NAME]
    try:
        if home.memory_md.is_file():
            _copy_private(home.memory_md, target / MEMORY_NAME)
            files.append(MEMORY_NAME)
        if home.snapshots.is_dir():
            (target / SNAPSHOTS).mkdir(mode=PRIVATE_DIR)
            os.chmod(target / SNAPSHOTS, PRIVATE_DIR)
            for f in sorted(home.snapshots.iterdir()):
                if f.is_file() and not f.is_symlink():
                    _copy_private(f, target / SNAPSHOTS / f.name)
                    files.append(f"{SNAPSHOTS}/{f.name}")
        if home.memory_map.is_file():
            _copy_private(home.memory_map, target / MAP_NAME)
            files.append(MAP_NAME)
    except OSError as e:
        raise CoworkerError(f"could not copy {e.filename} into {target} ({e.strerror}); the "
                            "backup there is incomplete: remove it and try again") from e

    integrity, counts, last_id, schema = _inspect(db_copy)
    manifest: dict[str, Any] = {
        "what": WHAT,
        "format": FORMAT,
        "coworker_version": __version__,
        "home": str(home.root),
        "taken_at": taken_at,
        "finished_at": _now(),
        "database": {"file": DB_NAME, "integrity_check": integrity, "schema": schema},
        "counts": counts,
        "last_event_id": last_id,
        "files": {rel: _fingerprint(target / rel) for rel in files},
        "not_included": NOT_INCLUDED,
    }
    _write_private(target / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if integrity != "ok":
        raise BackupRefused(f"the database copied into {target} fails integrity_check "
                            f"({integrity}): the live database is damaged; `coworker doctor` "
                            "says how to recover it (the copy is kept as it is)")
    return BackupReport(target, taken_at, counts, last_id, integrity, files)


# --- restoring one ---------------------------------------------------------------------------

def restore(home: Home, src: str | os.PathLike[str]) -> RestoreReport:
    """Bring the backup in `src` back into `home`, which must be stopped; what it replaces is
    moved aside into state/before-restore-<time>/ first."""
    source = _absolute(src)
    manifest = read_manifest(source)
    pid = process.running_pid(home)
    if pid is not None:
        raise BackupRefused(_running(home, pid))
    counts = verify(source, manifest)

    lock = process.PidLock(home)  # no loop starts while the files move
    try:
        lock.acquire()
    except AlreadyRunning as e:
        raise BackupRefused(_running(home, process.read_pid(home))) from e
    try:
        report = _swap(home, source, manifest, counts)
    finally:
        lock.release()
    if DB_NAME in report.moved_aside:
        report = replace(report, since=_reconcile(home, report.aside / DB_NAME))
    _record(home, report)
    return report


def _reconcile(home: Home, old_db: Path) -> Since:
    """Bring what the database moved aside knows of the time after the backup into the
    restored one (see `Since`). Only when both hold the same history (the backup's newest
    event is the same in both). The aside database is opened read-only: its files, -wal and
    -shm included, stay as they were. Whatever goes wrong here is said in the report's line,
    never raised: the files are in place already."""
    from .store import Store  # noqa: F811 - the module loads the store only when it restores

    since = Since()
    try:
        old = sqlite3.connect(f"{old_db.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        since.unread = str(e)
        return since
    try:
        with Store.open(home.db_path) as store:
            _bring_over(store, old, since)
    except Exception as e:  # noqa: BLE001 - reported in the line; the restore itself is done
        since.unread = f"{type(e).__name__}: {e}"
    finally:
        old.close()
    return since


def _bring_over(store: Store, old: sqlite3.Connection, since: Since) -> None:
    from .store import Event
    from .store import events as ev
    from .store import inputs as inputs_store

    top = int(store.scalar("SELECT coalesce(max(id), 0) FROM history") or 0)
    mine = store.query("SELECT ts, body FROM history WHERE id = ?", (top,))
    theirs = old.execute("SELECT ts, body FROM history WHERE id = ?", (top,)).fetchall()
    if not mine or not theirs or (mine[0][0], mine[0][1]) != tuple(theirs[0]):
        since.unread = "it holds another history than the backup"
        return
    waiting = {int(r[0]) for r in store.query("SELECT event_id FROM inputs WHERE status = "
                                              "'pending'")}
    for eid, status, failures, error in old.execute(
            "SELECT event_id, status, failures, last_error FROM inputs WHERE event_id <= ? "
            "AND status != 'pending'", (top,)):
        if int(eid) in waiting:
            inputs_store.carry(store, int(eid), status, int(failures), error)
            since.answered += status == "consumed"
            since.set_aside += status == "set_aside"
    for eid, ts, kind, actor, author_kind, body, meta, status, failures, error in old.execute(
            "SELECT h.id, h.ts, h.kind, h.actor, h.author_kind, h.body, h.meta, i.status, "
            "i.failures, i.last_error FROM inputs AS i JOIN history AS h ON h.id = i.event_id "
            "WHERE i.event_id > ? AND i.kind = 'message' ORDER BY i.event_id", (top,)):
        if status == "consumed":
            since.answered_after += 1
            continue
        new = inputs_store.add_message(store, Event(
            kind=kind, actor=actor, author_kind=author_kind, body=body, ts=ts,
            meta={**ev.read_meta(meta, eid), "restored_from": eid}))
        if status == "set_aside":
            inputs_store.carry(store, new, status, int(failures), error)
            since.set_aside += 1
        else:
            since.told_again.append(new)


def read_manifest(source: Path) -> dict[str, Any]:
    """The backup's manifest.json; UsageError when `source` is not a backup folder."""
    if not source.is_dir():
        raise UsageError(f"{source} is not a folder: give the folder `coworker backup DEST` "
                         "wrote")
    path = source / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{source} is not a coworker backup (no {MANIFEST} in it): give the "
                         "folder `coworker backup DEST` wrote") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} cannot be read as a backup manifest ({e}): give the folder "
                         "`coworker backup DEST` wrote") from None
    if not isinstance(data, dict) or data.get("what") != WHAT:
        raise UsageError(f"{path} is not a coworker backup manifest: give the folder "
                         "`coworker backup DEST` wrote")
    if data.get("format") != FORMAT:
        raise UsageError(f"{path} is a backup of format {data.get('format')!r}; this coworker "
                         f"reads format {FORMAT}: restore it with the version that wrote it")
    files = data.get("files")
    if not isinstance(files, dict) or DB_NAME not in files:
        raise UsageError(f"{path} lists no {DB_NAME}: it is not a whole backup")
    return data


def verify(source: Path, manifest: dict[str, Any]) -> dict[str, int]:
    """Every file as the manifest recorded it, and a database that passes integrity_check
    with the counts it had; BackupRefused naming what does not check out. Returns the counts."""
    for rel, want in sorted(manifest["files"].items()):
        path = source / rel
        if _escapes(source, path):
            raise BackupRefused(f"{source}/{MANIFEST} names {rel!r}, outside the backup: it was "
                                "changed by hand; nothing was restored")
        if not path.is_file():
            raise BackupRefused(f"{path} is missing: the backup is incomplete; nothing was "
                                "restored")
        if _fingerprint(path) != want:
            raise BackupRefused(f"{path} differs from what {MANIFEST} recorded: the backup was "
                                "changed or damaged since it was taken; nothing was restored")
    integrity, counts, _, _ = _inspect(source / DB_NAME)
    if integrity != "ok":
        raise BackupRefused(f"the backup's database {source / DB_NAME} fails integrity_check "
                            f"({integrity}); nothing was restored")
    if counts != manifest.get("counts"):
        raise BackupRefused(f"the backup's database holds {counts}, not the {manifest.get('counts')}"
                            f" its {MANIFEST} recorded; nothing was restored")
    return counts


def _swap(home: Home, source: Path, manifest: dict[str, Any],
          counts: dict[str, int]) -> RestoreReport:
    from .home import make_private_dir

    make_private_dir(home.state)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    stage = _new_dir(home.state / f".restore-{stamp}")
    aside = _new_dir(home.state / f"{ASIDE_PREFIX}{stamp}")
    files = sorted(manifest["files"])
    # 1. the backup's files, staged beside their places (a full disk stops us here, unchanged)
    try:
        for rel in files:
            staged = stage / rel
            if staged.parent != stage and not staged.parent.exists():
                staged.parent.mkdir(mode=PRIVATE_DIR, parents=True)
            _copy_private(source / rel, staged)
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        raise CoworkerError(f"could not copy the backup into {home.state} ({e.strerror}); "
                            "nothing was changed") from e
    # 2. what they replace, moved aside; 3. the staged files into place
    db = home.db_path
    current = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
               home.memory_md, home.snapshots, home.memory_map]
    moved: list[str] = []
    try:
        for path in current:
            if path.exists() or path.is_symlink():
                shutil.move(str(path), str(aside / path.name))
                moved.append(path.name)
        places = {DB_NAME: db, MEMORY_NAME: home.memory_md, MAP_NAME: home.memory_map}
        if any(rel.startswith(f"{SNAPSHOTS}/") for rel in files):
            shutil.move(str(stage / SNAPSHOTS), str(home.snapshots))
        for rel, place in places.items():
            if rel in files:
                shutil.move(str(stage / rel), str(place))
    except OSError as e:
        raise CoworkerError(f"the restore stopped half-way ({e}): what was here before is in "
                            f"{aside}, the backup's files are in {stage}; move them into place "
                            "by hand, or restore again") from e
    shutil.rmtree(stage, ignore_errors=True)
    make_private_dir(home.snapshots)
    return RestoreReport(source, str(manifest.get("taken_at", "?")), counts, aside, moved, files)


def _record(home: Home, report: RestoreReport) -> None:
    """One event in the restored database: when, from where, and where the old files are."""
    from .store import Event, Store
    from .store import events as ev

    with Store.open(home.db_path) as store:
        ev.append(store, Event(
            kind="backup_restored", actor="owner", author_kind="user",
            body=(f"restored the backup taken {report.taken_at} from {report.src}; what was "
                  f"here before is in {report.aside}"),
            meta={"src": str(report.src), "taken_at": report.taken_at,
                  "aside": str(report.aside), "moved_aside": report.moved_aside}))


# --- helpers ---------------------------------------------------------------------------------

def _verb(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _running(home: Home, pid: int | None) -> str:
    return (f"a coworker is running in {home.root} (pid {pid}): stop it first "
            "(`coworker stop`), then restore the backup")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _absolute(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    if not str(text).strip():
        raise UsageError("no folder given: coworker backup DEST, coworker restore-backup SRC")
    return Path(text).expanduser().absolute()


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _escapes(root: Path, path: Path) -> bool:
    return not _inside(path, root)


def _new_dir(base: Path) -> Path:
    """A new private folder named `base`, or base-2, base-3, ... when that exists."""
    path, n = base, 1
    while True:
        try:
            path.mkdir(mode=PRIVATE_DIR)
            os.chmod(path, PRIVATE_DIR)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _copy_private(src: Path, dest: Path) -> None:
    """Copy the bytes of `src` into the new file `dest`, 0600 whatever the umask."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    with open(fd, "wb") as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _fingerprint(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _inspect(db: Path) -> tuple[str, dict[str, int], int, str | None]:
    """integrity_check, row counts, the last event id and the last migration of a database
    file, read-only (a damaged file gives its integrity text and empty counts)."""
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return f"cannot open: {e}", {}, 0, None
    try:
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as e:
            return str(e), {}, 0, None
        integrity = "; ".join(str(r[0]) for r in rows[:5])
        if integrity != "ok":
            return integrity, {}, 0, None
        counts = {
            "events": conn.execute("SELECT COUNT(*) FROM events").fetchone()[0],
            "events_archive": conn.execute("SELECT COUNT(*) FROM events_archive").fetchone()[0],
            "rollups": conn.execute("SELECT COUNT(*) FROM rollups").fetchone()[0],
            "pins": conn.execute("SELECT COUNT(*) FROM pins WHERE unpinned_at IS NULL")
            .fetchone()[0],
        }
        last = conn.execute("SELECT MAX(id) FROM (SELECT id FROM events UNION ALL "
                            "SELECT id FROM events_archive)").fetchone()[0] or 0
        schema = conn.execute("SELECT name FROM _migrations ORDER BY rowid DESC LIMIT 1"
                              ).fetchone()
        return integrity, counts, int(last), schema[0] if schema else None
    except sqlite3.Error as e:
        return f"not a coworker database ({e})", {}, 0, None
    finally:
        conn.close()
