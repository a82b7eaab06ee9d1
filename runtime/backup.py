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

A home whose store is on PostgreSQL (`[store] url`, ADR-0044) is backed up the same way: its
coworker's rows are read in one snapshot (a REPEATABLE READ transaction: a loop writing
meanwhile is neither blocked nor half-copied) into the backup's coworker.db, a SQLite file,
each table verified (rows and SHA-256): a backup has one shape whichever backend made it, and
restores into either. The manifest's "store" says which backend it came from (the URL without
its password, the schema version, the rows of each table).

`restore` brings a backup back into a stopped home, all or nothing (ADR-0037): it checks the
backup first (every file against the manifest, the database with integrity_check) and holds
the pidfile lock while it works, so no loop starts meanwhile. It prepares the whole restored
coworker in state/.restore-<time>/: the backup's files, then what the database in place (read
only, its -wal and -shm as they are) holds past the backup when it holds the same history
(`Since`): inputs it answered are marked answered, and messages told after the backup that
were still waiting are told again; then one `backup_restored` event. Only then the switch:
under a plan (state/restore-unfinished.json) it moves what it replaces (the database with its
-wal and -shm, MEMORY.md, snapshots/, memory-map.md) aside into state/before-restore-<time>/
(nothing is lost) and the prepared files into place, then removes the plan. A switch that
fails is rolled back; one that cannot be (or a crash) leaves the plan, which makes every
command refuse (runtime/home.py) until `finish` or `roll_back` settles it.

Into a PostgreSQL home, a restore also refuses while a loop on any host holds the coworker's
claim (naming that host), and nothing there is moved: the schema's rows are copied aside first
(one snapshot, into before-restore-<time>/coworker.db, a SQLite file: nothing is lost, and
the reconciling above reads it); then, before any file moves, the switch holds the coworker
(its claim, so no loop starts on any host, and its write lock, so a `tell` from another host
waits) and replaces the schema's rows with the prepared file's, table by table in batches,
each table verified (rows and SHA-256). Refused, with nothing changed, when the schema was
written after its rows were kept aside. The plan records that step's phase before each part
of it, so `finish` (filling the schema with the backup's rows again) and `roll_back` (with
the rows kept aside) start from any point, as they do for files.

Errors are CoworkerErrors: UsageError (exit 2) for a path that cannot be a backup or a
destination, BackupRefused (exit 1) for a refusal (a folder that is not empty, a running
coworker, a backup that does not check out, a switch rolled back), RestoreUnfinished (exit 1)
when a restore is left half-way. Nothing here prints; each report has a `line()`.

The database's copy, its check, its counts and the reading of the database moved aside are
the store's (runtime/store/backup_queries.py); this module keeps the policy: what goes where
and when, the names, the plan, the messages. It speaks no SQL.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, process
from .errors import AlreadyRunning, CoworkerError, StoreError, UsageError
from .home import PRIVATE_DIR, PRIVATE_FILE, Home, RestoreUnfinished

if TYPE_CHECKING:
    from .store import Store
    from .store.backup_queries import Inspection

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
    source: str | None = None  # a PostgreSQL store's URL (no password) and schema; None: SQLite

    @property
    def snapshots(self) -> int:
        return sum(1 for f in self.files if f.startswith(f"{SNAPSHOTS}/") and f.endswith(".md"))

    def line(self) -> str:
        c = self.counts
        extra = [MEMORY_NAME] if MEMORY_NAME in self.files else []
        extra.append(_n(self.snapshots, "MEMORY.md snapshot"))
        if MAP_NAME in self.files:
            extra.append("the memory map")
        what = ("the database" if self.source is None else
                f"the store {self.source}, read in one snapshot into a SQLite file")
        return (f"backup taken in {self.dest}: {what} "
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
    into: str | None = None  # a PostgreSQL store's URL (no password) and schema; None: SQLite

    def line(self) -> str:
        c = self.counts
        kept = (f"what was here before is in {self.aside}" if self.moved_aside else
                f"nothing was here to move aside (the folder {self.aside} is empty)")
        since = f"; {self.since.line(self.aside)}" if self.since and self.since.line(
            self.aside) else ""
        into = f" into {self.into}" if self.into else ""
        return (f"restored the backup taken {self.taken_at} from {self.src}{into} "
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
    """Copy the coworker in `home` into the new folder `dest`; safe while the loop runs. A
    store on PostgreSQL is read in one snapshot into a SQLite file: a backup has one shape
    whichever backend made it, and restores into either."""
    from .store import backup_queries as bq

    target = _absolute(dest)
    _refuse_dest(home, target)
    _make_dest(target)
    taken_at = _now()
    store = _copy_store(home, target / DB_NAME)
    files = [DB_NAME, *_copy_files(home, target)]
    seen = bq.inspect(target / DB_NAME)
    _write_private(target / MANIFEST, json.dumps(
        _manifest(home, target, taken_at, seen, files, store), indent=2, sort_keys=True) + "\n")
    if seen.integrity != "ok":
        raise BackupRefused(f"the database copied into {target} fails integrity_check "
                            f"({seen.integrity}): the live database is damaged; `coworker "
                            "doctor` says how to recover it (the copy is kept as it is)")
    return BackupReport(target, taken_at, seen.counts, seen.last_event_id, seen.integrity,
                        files, None if store["backend"] == "sqlite" else store["where"])


def _copy_store(home: Home, db: Path) -> dict[str, Any]:
    """The home's store, consistent, in the new SQLite file `db` (SQLite's online backup, or
    a PostgreSQL store's rows read in one snapshot); what the manifest says of where it came
    from (never a password). A copy that fails leaves no file."""
    from .store import backup_queries as bq

    where = home.store_where()
    try:
        if home.store_url() is None:
            bq.snapshot_to(home.db_path, db)
            return {"backend": "sqlite", "where": where}
        with home.open_store(readonly=True) as store:
            copied = bq.copy_out(store, db)
            pg_store: Any = store  # a PgStore here: its schema's version
            version = pg_store.schema_version()
    except bq.CopyFailed as e:
        for f in (db, *bq.beside(db)):
            f.unlink(missing_ok=True)
        raise CoworkerError(f"could not copy the database {where} into {db.parent} ({e}); "
                            "`coworker doctor` checks the database") from e
    return {"backend": "postgresql", "where": where, "schema_version": version,
            "snapshot": "one REPEATABLE READ transaction",
            "tables": {c.table: c.source_rows for c in copied}}


def _refuse_dest(home: Home, target: Path) -> None:
    """UsageError or BackupRefused when `target` cannot take a backup of `home`."""
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
    if not home.has_store():
        raise BackupRefused(f"nothing to back up in {home.root}: no database at {home.db_path} "
                            "yet (the coworker creates it when it first runs)")


def _make_dest(target: Path) -> None:
    try:
        target.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        os.chmod(target, PRIVATE_DIR)
    except OSError as e:
        raise UsageError(f"cannot create the backup folder {target} ({e.strerror}): give a "
                         "path you can write") from e


def _copy_files(home: Home, target: Path) -> list[str]:
    """MEMORY.md, the snapshots and the memory map copied into `target`; their names there."""
    files = []
    try:
        if home.memory_md.is_file():
            _copy_private(home.memory_md, target / MEMORY_NAME)
            files.append(MEMORY_NAME)
        if home.snapshots.is_dir():
            files += _copy_snapshots(home.snapshots, target / SNAPSHOTS)
        if home.memory_map.is_file():
            _copy_private(home.memory_map, target / MAP_NAME)
            files.append(MAP_NAME)
    except OSError as e:
        raise CoworkerError(f"could not copy {e.filename} into {target} ({e.strerror}); the "
                            "backup there is incomplete: remove it and try again") from e
    return files


def _copy_snapshots(snapshots: Path, into: Path) -> list[str]:
    into.mkdir(mode=PRIVATE_DIR)
    os.chmod(into, PRIVATE_DIR)
    files = []
    for f in sorted(snapshots.iterdir()):
        if f.is_file() and not f.is_symlink():
            _copy_private(f, into / f.name)
            files.append(f"{SNAPSHOTS}/{f.name}")
    return files


def _manifest(home: Home, target: Path, taken_at: str, seen: Inspection,
              files: list[str], store: dict[str, Any]) -> dict[str, Any]:
    return {
        "what": WHAT,
        "format": FORMAT,
        "coworker_version": __version__,
        "home": str(home.root),
        "taken_at": taken_at,
        "finished_at": _now(),
        "database": {"file": DB_NAME, "integrity_check": seen.integrity, "schema": seen.schema},
        "store": store,  # the backend it came from; the file is SQLite's whichever it was
        "counts": seen.counts,
        "last_event_id": seen.last_event_id,
        "files": {rel: _fingerprint(target / rel) for rel in files},
        "not_included": NOT_INCLUDED,
    }


# --- restoring one ---------------------------------------------------------------------------

def restore(home: Home, src: str | os.PathLike[str]) -> RestoreReport:
    """Bring the backup in `src` back into `home`, which must be stopped: all or nothing.
    Everything is prepared in state/.restore-<time>/ first (the files copied, what the
    database here holds past the backup brought over, the `backup_restored` event written),
    then one switch moves what it replaces into state/before-restore-<time>/ and the prepared
    files into place. A switch that fails is rolled back; one that cannot be (or a crash)
    leaves the marker that makes every command refuse until `finish` or `roll_back`."""
    home.refuse_unfinished_restore()
    source = _absolute(src)
    manifest = read_manifest(source)
    pid = process.running_pid(home)
    if pid is not None:
        raise BackupRefused(_running(home, pid))
    counts = verify(source, manifest)
    with _locked(home):  # no loop starts while the files move
        _refuse_claimed(home)
        report, stage = _prepare(home, source, manifest, counts)
        _switch(home, _plan(home, report, stage))
    return report


def _refuse_claimed(home: Home) -> None:
    """BackupRefused naming the host when a loop holds this coworker's claim on its
    PostgreSQL store (on any host; a SQLite home's loop holds the pidfile, checked apart)."""
    if home.store_url() is None:
        return
    from .store import pg_runner

    with home.open_store() as store:
        held = pg_runner.current(store)
    if held is not None and held.holding:
        raise BackupRefused(f"this coworker runs on {held.host} (pid {held.pid}, since "
                            f"{held.since}) on {home.store_where()}: stop it there first "
                            f"(`coworker stop` on {held.host}), then restore the backup")


def finish(home: Home) -> str:
    """Complete the restore that stopped half-way in `home`; its report's line."""
    return str(_settle(home, _move_in, "finish")["line"])


def roll_back(home: Home) -> str:
    """Undo the restore that stopped half-way in `home`: what was here goes back in place."""
    plan = _settle(home, _move_back, "rollback")
    return (f"rolled back the restore of the backup taken {plan['taken_at']} from "
            f"{plan['src']}: what was here before is back in place; `coworker restore-backup "
            f"{plan['src']}` tries again")


def _settle(home: Home, step: Callable[[Home, dict[str, Any]], None],
            option: str) -> dict[str, Any]:
    """Run `step` (finish or roll back) on the plan left in `home`; the plan."""
    with _locked(home):
        plan = _read_plan(home, option)
        try:
            step(home, plan)
        except (OSError, StoreError) as e:
            raise RestoreUnfinished(f"could not {option} the restore ({_why(e)}); nothing is "
                                    f"lost: fix that, then run `coworker restore-backup "
                                    f"--{option}` again") from e
    return plan


@contextmanager
def _locked(home: Home) -> Iterator[None]:
    """Hold the pidfile lock: no coworker starts here meanwhile (BackupRefused if one runs)."""
    lock = process.PidLock(home)
    try:
        lock.acquire()
    except AlreadyRunning as e:
        raise BackupRefused(_running(home, process.read_pid(home))) from e
    try:
        yield
    finally:
        lock.release()


def _reconcile(old_db: Path, new_db: Path) -> Since:
    """Bring what the database `old_db` knows of the time after the backup into the restored
    one, `new_db` (see `Since`). Only when both hold the same history (the backup's newest
    event is the same in both). The old database is opened read-only: its files, -wal and
    -shm included, stay as they were. Whatever goes wrong here is said in the report's line,
    never raised."""
    from .store import Store  # noqa: F811 - the module loads the store only when it restores
    from .store import backup_queries as bq

    since = Since()
    try:
        old = bq.open_aside(old_db)
    except StoreError as e:
        since.unread = str(e)
        return since
    try:
        with Store.open(new_db) as store:
            _bring_over(store, old, since)
    except Exception as e:  # noqa: BLE001 - reported in the line; the restore goes on
        since.unread = f"{type(e).__name__}: {e}"
    finally:
        old.close()
    return since


def _bring_over(store: Store, old: Store, since: Since) -> None:
    from .store import backup_queries as bq

    top = bq.newest_id(store)
    mine = bq.head(store, top)
    if mine is None or mine != bq.head(old, top):
        since.unread = "it holds another history than the backup"
        return
    _carry_answered(store, old, top, since)
    _tell_again(store, old, top, since)


def _carry_answered(store: Store, old: Store, top: int, since: Since) -> None:
    """Inputs the backup holds as waiting that the old database answered or set aside."""
    from .store import backup_queries as bq
    from .store import inputs as inputs_store

    waiting = bq.waiting(store)
    for s in bq.settled_upto(old, top):
        if s.event_id in waiting:
            inputs_store.carry(store, s.event_id, s.status, s.failures, s.error)
            since.answered += s.status == "consumed"
            since.set_aside += s.status == "set_aside"


def _tell_again(store: Store, old: Store, top: int, since: Since) -> None:
    """Messages told after the backup: answered ones counted, the others told again."""
    from .store import backup_queries as bq
    from .store import inputs as inputs_store

    for event, s in bq.told_after(old, top):
        if s.status == "consumed":
            since.answered_after += 1
            continue
        new = inputs_store.add_message(store, replace(
            event, id=None, meta={**event.meta, "restored_from": event.id}))
        if s.status == "set_aside":
            inputs_store.carry(store, new, s.status, s.failures, s.error)
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
    from .store import backup_queries as bq

    seen = bq.inspect(source / DB_NAME)
    if seen.integrity != "ok":
        raise BackupRefused(f"the backup's database {source / DB_NAME} fails integrity_check "
                            f"({seen.integrity}); nothing was restored")
    if seen.counts != manifest.get("counts"):
        raise BackupRefused(f"the backup's database holds {seen.counts}, not the "
                            f"{manifest.get('counts')} its {MANIFEST} recorded; nothing was "
                            "restored")
    return seen.counts


def _prepare(home: Home, source: Path, manifest: dict[str, Any],
             counts: dict[str, int]) -> tuple[RestoreReport, Path]:
    """The restored coworker, whole, in a new state/.restore-<time>/ (and an empty
    state/before-restore-<time>/ for what it replaces); nothing in place is changed. On any
    failure both folders are removed again."""
    from .home import make_private_dir
    from .store import backup_queries as bq

    make_private_dir(home.state)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    stage = _new_dir(home.state / f".restore-{stamp}")
    aside = _new_dir(home.state / f"{ASIDE_PREFIX}{stamp}")
    files = sorted(manifest["files"])
    try:
        for rel in files:
            staged = stage / rel
            if staged.parent != stage and not staged.parent.exists():
                staged.parent.mkdir(mode=PRIVATE_DIR, parents=True)
            _copy_private(source / rel, staged)
        old, moved = _keep_store(home, aside)
        moved += [place.name for place in _places(home) if _there(place)]
        report = RestoreReport(source, str(manifest.get("taken_at", "?")), counts, aside,
                               moved, files, into=_into(home))
        if old is not None:
            report = replace(report, since=_reconcile(old, stage / DB_NAME))
        _record(stage / DB_NAME, report)
        bq.seal(stage / DB_NAME)
    except (OSError, CoworkerError) as e:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)
        raise CoworkerError(f"could not prepare the backup in {home.state} ({_why(e)}); "
                            "nothing was changed") from e
    return report, stage


def _into(home: Home) -> str | None:
    return None if home.store_url() is None else home.store_where()


def _keep_store(home: Home, aside: Path) -> tuple[Path | None, list[str]]:
    """The database whose history a restore reconciles with (None: none here), and what a
    PostgreSQL store keeps aside: its rows, read in one snapshot, copied into the SQLite file
    aside/coworker.db before anything is replaced (nothing is lost; a rollback puts them
    back). A SQLite home's database is moved aside whole by the switch instead."""
    if home.store_url() is None:
        return (home.db_path if _there(home.db_path) else None), []
    from .store import backup_queries as bq

    with home.open_store() as store:
        bq.copy_out(store, aside / DB_NAME)
    held = bq.newest_in(aside / DB_NAME) is not None
    return (aside / DB_NAME if held else None), [DB_NAME]


def _record(db: Path, report: RestoreReport) -> None:
    """One event in the restored database: when, from where, and where the old files are."""
    from .store import Event
    from .store import backup_queries as bq

    bq.record(db, Event(
        kind="backup_restored", actor="owner", author_kind="user",
        body=(f"restored the backup taken {report.taken_at} from {report.src}; what was "
              f"here before is in {report.aside}"),
        meta={"src": str(report.src), "taken_at": report.taken_at,
              "aside": str(report.aside), "moved_aside": report.moved_aside}))


# --- the switch, and settling one that stopped half-way ----------------------------------------
#
# The plan (state/restore-unfinished.json, written before the first move and removed after
# the last) names the prepared folder, the aside folder and which places get a file of the
# backup. Whether a step is done is read from the files themselves, so finishing and rolling
# back can each start from any point, and run again after stopping themselves.

def _places(home: Home) -> list[Path]:
    """What a restore replaces, in the order it is moved aside: the files beside the old
    database (its -wal and -shm) before the database (a -wal never lies beside a database not
    its own)."""
    from .store.backup_queries import beside

    db = [*beside(home.db_path), home.db_path] if home.store_url() is None else []
    return [*db, home.memory_md, home.snapshots, home.memory_map]


def _plan(home: Home, report: RestoreReport, stage: Path) -> dict[str, Any]:
    plan: dict[str, Any] = {"what": "coworker restore-backup", "src": str(report.src),
                            "taken_at": report.taken_at, "stage": stage.name,
                            "aside": report.aside.name,
                            "restores": [p.name for p in _places(home) if _there(stage / p.name)],
                            "line": report.line()}
    if report.into is not None:  # a PostgreSQL store: its rows are replaced, not moved
        from .store import backup_queries as bq

        plan["store"] = {"where": report.into, "before": bq.newest_in(report.aside / DB_NAME),
                         "phase": None}
    return plan


def _switch(home: Home, plan: dict[str, Any]) -> None:
    """Write the plan, move everything, remove the plan; roll back when a move fails."""
    try:
        _write_plan(home, plan)
    except OSError as e:
        shutil.rmtree(home.state / plan["stage"], ignore_errors=True)
        shutil.rmtree(home.state / plan["aside"], ignore_errors=True)
        raise CoworkerError(f"could not write {home.restore_marker} ({_why(e)}); nothing was "
                            "changed") from e
    try:
        _move_in(home, plan)
    except (OSError, StoreError) as e:
        try:
            _move_back(home, plan)
        except (OSError, StoreError) as again:
            raise RestoreUnfinished(
                f"the restore stopped half-way ({_why(e)}) and could not be rolled back "
                f"({_why(again)}); nothing is lost, and every command waits until "
                "`coworker restore-backup --finish` completes it or `coworker restore-backup "
                "--rollback` puts back what was here") from e
        raise BackupRefused(f"the restore stopped half-way ({_why(e)}) and was rolled back: "
                            "nothing was changed; fix that, then restore again") from e


def _move_in(home: Home, plan: dict[str, Any]) -> None:
    stage, aside = home.state / plan["stage"], home.state / plan["aside"]
    if "store" in plan:  # first: until it is done no file has moved
        _store_in(home, plan, stage / DB_NAME)
    for place in _places(home):
        restores = place.name in plan["restores"]
        if restores and not _there(stage / place.name):
            continue  # in place already
        if _there(place):
            _move(place, _free(aside / place.name))
        if restores:
            _move(stage / place.name, place)
    _settled(home, stage)
    if home.snapshots.is_dir():
        os.chmod(home.snapshots, PRIVATE_DIR)


def _move_back(home: Home, plan: dict[str, Any]) -> None:
    stage, aside = home.state / plan["stage"], home.state / plan["aside"]
    stage.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    for place in reversed(_places(home)):
        if place.name in plan["restores"] and not _there(stage / place.name) and _there(place):
            _move(place, stage / place.name)
        if _there(aside / place.name) and not _there(place):
            _move(aside / place.name, place)
    if "store" in plan and _store_back(home, plan, aside / DB_NAME):
        (aside / DB_NAME).unlink(missing_ok=True)  # its rows are in place (verified)
    _settled(home, stage)
    with suppress(OSError):
        aside.rmdir()  # only when empty: whatever else is there stays


# A PostgreSQL store's step of the plan, its "phase": None (not touched yet), "filling" (being
# given the backup's rows: what it holds is unknown until a fill ends), "in" (it holds them,
# verified), "refilling" (being given its own rows back). Each is written before the step it
# names, so finishing (a fill with the backup's rows) and rolling back (a fill with the rows
# kept aside) can start from any of them.
PHASES = (None, "filling", "in", "refilling")


def _store_in(home: Home, plan: dict[str, Any], db: Path) -> None:
    """The PostgreSQL store given the rows of the prepared file `db`, with the coworker held
    (its claim and write lock), unless it holds them already. StoreError when a loop holds the
    claim, when the store was written since its rows were kept aside (nothing is changed
    then), or a table does not verify."""
    from .store import backup_queries as bq

    if plan["store"]["phase"] == "in":
        return
    with home.open_store() as store, bq.held(store):
        if plan["store"]["phase"] is None and bq.newest(store) != plan["store"]["before"]:
            raise StoreError(f"{plan['store']['where']} was written since its rows were kept "
                             "aside (another host told the coworker something?)")
        _phase(home, plan, "filling")
        bq.fill(store, _present(db))
    _phase(home, plan, "in")


def _store_back(home: Home, plan: dict[str, Any], db: Path) -> bool:
    """The PostgreSQL store given back the rows kept aside in `db` once a fill has begun;
    whether it holds them now (then `db` is a copy of what is in place)."""
    from .store import backup_queries as bq

    with home.open_store() as store:
        if plan["store"]["phase"] is None:  # never touched
            return bool(bq.newest(store) == plan["store"]["before"])
        with bq.held(store):
            _phase(home, plan, "refilling")
            bq.fill(store, _present(db))
    return True


def _phase(home: Home, plan: dict[str, Any], phase: str) -> None:
    plan["store"]["phase"] = phase
    _write_plan(home, plan)


def _present(db: Path) -> Path:
    if not db.is_file():
        raise StoreError(f"{db} is not there: the store's rows cannot be brought from it")
    return db


def _move(src: Path, dest: Path) -> None:
    """One rename: the file or folder is in one place or the other, never half in both (a
    folder that cannot be renamed, `chattr +i`, is an error, not a copy). Only across file
    systems (state/ mounted apart from the home) is it copied, then removed."""
    try:
        os.rename(src, dest)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.move(str(src), str(dest))


def _settled(home: Home, stage: Path) -> None:
    """The moves made durable, the prepared folder removed, a PostgreSQL store's mark taken
    off, then the plan: the commit."""
    for folder in (home.state, home.root):
        _fsync_dir(folder)
    shutil.rmtree(stage, ignore_errors=True)
    if home.store_url() is not None:
        from .store import backup_queries as bq

        with home.open_store() as store:
            bq.settled(store)
    home.restore_marker.unlink(missing_ok=True)
    _fsync_dir(home.state)


def _write_plan(home: Home, plan: dict[str, Any]) -> None:
    marker = home.restore_marker
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.unlink(missing_ok=True)
    _write_private(tmp, json.dumps(plan, indent=2) + "\n")
    os.replace(tmp, marker)
    _fsync_dir(home.state)


def _read_plan(home: Home, verb: str) -> dict[str, Any]:
    """The plan of the restore that stopped half-way; BackupRefused when there is none."""
    marker = home.restore_marker
    try:
        plan = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupRefused(f"nothing to {verb} in {home.root}: no restore stopped half-way "
                            "there") from None
    except (OSError, ValueError) as e:
        plan = {"unreadable": str(e)}
    names = {p.name for p in _places(home)}
    if not (isinstance(plan, dict) and all(isinstance(plan.get(k), str) for k in
                                           ("stage", "aside", "src", "taken_at", "line"))
            and all(Path(plan[k]).name == plan[k] not in ("", ".", "..") for k in
                    ("stage", "aside"))
            and isinstance(plan.get("restores"), list) and set(plan["restores"]) <= names):
        raise RestoreUnfinished(f"{marker} cannot be read: the backup's files are in "
                                f"{home.state}/.restore-*, what was here before in "
                                f"{home.state}/{ASIDE_PREFIX}*; move them by hand, then "
                                f"remove {marker}")
    _same_store(home, plan)
    return plan


def _same_store(home: Home, plan: dict[str, Any]) -> None:
    """RestoreUnfinished when the plan was made for another store than the home's now (or
    its PostgreSQL part cannot be read)."""
    store = plan.get("store")
    if store is not None and not (isinstance(store, dict) and isinstance(store.get("where"), str)
                                  and isinstance(store.get("before"), list | None)
                                  and store.get("phase") in PHASES):
        raise RestoreUnfinished(f"{home.restore_marker} cannot be read (its \"store\"): the "
                                f"store's rows before the restore are in {home.state}/"
                                f"{ASIDE_PREFIX}*/{DB_NAME}; settle it by hand, then remove "
                                f"{home.restore_marker}")
    was = store["where"] if store is not None else None
    now = _into(home)
    if was != now:
        raise RestoreUnfinished(
            f"the restore that stopped half-way in {home.root} was into "
            f"{was or 'the SQLite file ' + str(home.db_path)}, and this home's store is now "
            f"{now or 'its SQLite file'}: put [store] url back as it was, then settle it")


# --- helpers ---------------------------------------------------------------------------------

def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _free(path: Path) -> Path:
    """`path`, or path-2, path-3, ... when it is taken: a move never overwrites anything."""
    candidate, n = path, 1
    while _there(candidate):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _fsync_dir(folder: Path) -> None:
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return str(e) or type(e).__name__


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
