"""Where a coworker lives: its folder, config.toml, state/, MEMORY.md, pidfile and logs.

Owns the paths and the creation of a new home (`coworker init`). The home is the folder named
by the COWORKER_HOME environment variable, else the current folder. It never opens the database
and never interprets settings beyond loading them.

Privacy, as ssh does it: state/ is 0700 (tightened when found looser), and the coworker's own
files (MEMORY.md, config.toml written by init, the database and its -wal/-shm, logs, run.json,
snapshots) are 0600. `private_umask()` sets the process umask to 077 so every file the process
creates later (SQLite's, os.replace targets, snapshots) is private too; the CLI calls it first.

A home in the middle of a `restore-backup` (state/restore-unfinished.json is there: the restore
stopped half-way, see runtime/backup.py) is no coworker to run: `require()` and `init()` refuse
it with one line (`RestoreUnfinished`, exit 1) before they create anything, so no command takes
the missing database for a new, empty one. Only `restore-backup --finish` and `--rollback`
open it (`require(settling=True)`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import settings as settings_mod
from .errors import CoworkerError, NotInitialised, UsageError

if TYPE_CHECKING:
    from .store import Store

MEMORY_MD_HEADER = (
    "# MEMORY\n\n"
    "What this coworker always has in mind: one entry a line, `- [mNNN] text (sources: ...; date)`.\n"
    "Edit by hand if you like; `coworker strike`, `unstrike` and `restore` keep versions.\n\n"
)


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
RESTORE_MARKER = "restore-unfinished.json"


class RestoreUnfinished(CoworkerError):
    """A `restore-backup` stopped half-way in this home: nothing runs here until it is
    finished or rolled back. Exit 1."""


def private_umask() -> int:
    """Make every file and folder this process creates from now on private to its owner
    (umask 077); return the previous umask. Call it once, at the process's entry point."""
    return os.umask(0o077)


def make_private_dir(path: Path) -> None:
    """Create `path` 0700, or tighten it to 0700 when it exists with group/other bits. A file
    where a folder must be (the home, or state/ in it) is the user's to move: a UsageError."""
    try:
        path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise not_a_folder(path) from e
    tighten(path, PRIVATE_DIR)


def not_a_folder(path: Path) -> UsageError:
    """The error for a folder of the home that is a file (it, or a folder above it)."""
    at = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
    return UsageError(f"{at} is a file, not a folder, so no coworker home can be made there: "
                      "move it aside, or choose another folder (COWORKER_HOME)")


def tighten(path: Path, mode: int) -> None:
    """Take from `path` every permission bit `mode` does not grant (never adds one; a file we
    do not own, or that vanished, is left alone)."""
    try:
        st = path.stat()
        current = stat.S_IMODE(st.st_mode)
        if current & ~mode and st.st_uid == os.getuid():
            path.chmod(current & mode)
    except OSError:
        pass


def write_private(path: Path, text: str) -> None:
    """Create a new file 0600 (whatever the umask) holding `text`; FileExistsError if it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _names_a_store(config: Path) -> bool:
    """Whether config.toml's text sets a [store] url (read when the config does not load): a
    `url =` line under a `[store]` header, or `store.url =` / `store = {` at the top. Meant to
    err towards yes: a home that names a database never falls back to a new SQLite file."""
    import re

    from .files import read_regular

    try:  # never a FIFO or a device: a config that is one is said by loading the settings
        text = read_regular(config).decode("utf-8", errors="replace")
    except OSError:
        return False
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if header := re.match(r"\[\s*([^\]\s]+)\s*\]", line):
            section = header.group(1).strip("\"' ")
        elif section == "store" and re.match(r"[\"']?url[\"']?\s*=", line):
            return True
        elif section == "" and re.match(r"[\"']?store[\"']?\s*(\.|=)", line):
            return True
    return False


def _resolved_url(url: str, st: settings_mod.Settings) -> str:
    """[store] url with a "secret:NAME" read (from state/secrets.toml or the environment),
    registered for redaction whole and its password apart; UsageError for a value libpq would
    misread (a password with an unencoded / ? # @ puts the password where the host goes, and
    libpq's error would then echo it)."""
    from urllib.parse import urlsplit

    from .secrecy import register_secret
    from .settings_talk import SECRET_PREFIX, resolve_secret

    if not url.startswith(SECRET_PREFIX):
        return url
    value = resolve_secret(url, st.secrets, "[store] url")
    register_secret(value)
    try:
        parts = urlsplit(value)
        register_secret(parts.password)
        bad = parts.scheme not in ("postgresql", "postgres") or \
            "@" in parts.path + parts.query + parts.fragment
    except ValueError:
        bad = True
    if bad:
        raise UsageError(f"[store] url names {url}, which is not a postgresql://USER:PASSWORD@"
                         "HOST/DB URL libpq reads as meant: percent-encode / ? # @ : in the "
                         "password (%2F %3F %23 %40 %3A)")
    return value


def _postgres() -> tuple[Any, Any]:
    """The PostgreSQL store's modules, or UsageError saying how to install them."""
    try:
        from .store import pg, pg_schema
    except ImportError as e:
        raise UsageError("[store] url names a PostgreSQL database, which needs psycopg: "
                         "pip install 'coworker[postgres]'") from e
    return pg, pg_schema


@dataclass(frozen=True)
class Home:
    root: Path
    # what loading this home's settings has said once (a removed key's WARNING): the home's,
    # so a loop that reloads its config, or a command that reads it twice, says it once
    said: set[str] = field(default_factory=set, compare=False, hash=False, repr=False)
    # which store this home's config chooses, and the files' stamps it was read at (_choice)
    _store: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def locate(cls, root: str | os.PathLike[str] | None = None) -> Home:
        if root is None:
            root = os.environ.get("COWORKER_HOME") or os.getcwd()
        return cls(Path(root).expanduser().resolve())

    # paths -------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def db_path(self) -> Path:
        return self.state / "coworker.db"

    def open_store(self, *, readonly: bool = False, busy_timeout_ms: int | None = None,
                   migrate: bool = True) -> Store:
        """This home's store: the one place a backend is chosen (ADR-0044): the SQLite file
        state/coworker.db, or with `[store] url` this coworker's schema on PostgreSQL. A reader
        of a home with no history yet gets an empty, migrated store, as a writer would make it."""
        from .store.db import BUSY_TIMEOUT_MS

        timeout = BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms
        url = self.store_url()
        if url is None:
            from .store import Store

            return Store.open(self.db_path, readonly=readonly and self.has_store(),
                              migrate=migrate, busy_timeout_ms=timeout)
        pg, pg_schema = _postgres()
        cid = self._choice()[1]
        assert cid is not None  # _choice refuses a PostgreSQL store without an id
        try:
            store = pg.PgStore.open(url, cid, readonly=readonly, migrate=migrate,
                                    busy_timeout_ms=timeout)
        except pg_schema.NotYet:
            store = pg.PgStore.open(url, cid, migrate=True, busy_timeout_ms=timeout)
        return cast("Store", store)

    def has_store(self) -> bool:
        """Whether this home has a history yet (its SQLite file exists; on PostgreSQL, the
        database is where the history is kept: a reader makes its schema when missing)."""
        return self.store_url() is not None or self.db_path.exists()

    def store_url(self) -> str | None:
        """The PostgreSQL URL of this home's store (a "secret:NAME" resolved; it may hold a
        password: never print it, see store_where), or None for the SQLite file."""
        return self._choice()[0]

    def store_where(self) -> str:
        """Where the store is, as messages name it: the SQLite path, or the database's URL
        without its password and the coworker's schema."""
        url = self.store_url()
        if url is None:
            return str(self.db_path)
        pg, _ = _postgres()
        return f"{pg.describe(url)} (schema cw_{self._choice()[1]})"

    def _choice(self) -> tuple[str | None, str | None]:
        """([store] url resolved or None, [coworker] id), read again only when config.toml,
        state/secrets.toml or the environment changed. A config that does not load, with no
        [store] url in it or the environment, is a SQLite home (its commands say what is wrong
        with the config when they read it)."""
        key = (_stamp(self.config_path), _stamp(self.state / settings_mod.SECRETS_FILE),
               os.environ.get(f"{settings_mod.ENV_PREFIX}STORE__URL"),
               os.environ.get(f"{settings_mod.ENV_PREFIX}COWORKER__ID"))
        if self._store.get("key") == key:
            return self._store["choice"]
        try:
            st = self.settings()
        except CoworkerError:
            if key[2] is None and not _names_a_store(self.config_path):
                return None, None
            raise
        url = st.store.url
        if url is not None:
            url = _resolved_url(url, st)
            if not st.coworker.id:
                raise UsageError("[store] url names a database but this home has no [coworker] "
                                 "id: add id = \"<lowercase letters, digits, _>\" under "
                                 "[coworker] in config.toml (`coworker init` writes one)")
        self._store.update(key=key, choice=(url, st.coworker.id))
        return url, st.coworker.id

    @property
    def memory_md(self) -> Path:
        return self.root / "MEMORY.md"

    @property
    def pidfile(self) -> Path:
        return self.state / "coworker.pid"

    @property
    def runfile(self) -> Path:
        return self.state / "run.json"

    @property
    def log_path(self) -> Path:
        return self.state / "coworker.log"

    @property
    def out_path(self) -> Path:
        return self.state / "coworker.out"

    @property
    def inbox(self) -> Path:
        return self.state / "inbox"

    @property
    def outbox(self) -> Path:
        return self.state / "outbox"

    @property
    def snapshots(self) -> Path:
        return self.state / "snapshots"

    @property
    def memory_map(self) -> Path:
        return self.state / "memory-map.md"

    @property
    def restore_marker(self) -> Path:
        return self.state / RESTORE_MARKER

    @property
    def secrets_path(self) -> Path:
        return settings_mod.secrets_path(self.config_path)

    def private_files(self) -> list[Path]:
        """The coworker's own files in state/ that hold what it knows (0600 each)."""
        db = self.db_path
        files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
                 self.runfile, self.out_path, self.memory_map, self.secrets_path]
        files += sorted(self.state.glob(self.log_path.name + "*"))
        return files

    # life --------------------------------------------------------------------------------
    def is_initialised(self) -> bool:
        return self.config_path.exists()

    def require(self, *, settling: bool = False) -> Home:
        """This home, ready to use; NotInitialised without config.toml, RestoreUnfinished while
        a restore stopped half-way (unless `settling` it: then nothing is created either)."""
        if not self.is_initialised():
            raise NotInitialised(
                f"no coworker in {self.root} (no config.toml): run `coworker init` here, "
                "or set COWORKER_HOME to a coworker's folder"
            )
        if settling:
            self.ensure_state()
            return self
        self.refuse_unfinished_restore()
        self.ensure_dirs()
        return self

    def refuse_unfinished_restore(self) -> None:
        """RestoreUnfinished when a `restore-backup` stopped half-way here."""
        if self.restore_marker.exists() or self.restore_marker.is_symlink():
            raise RestoreUnfinished(
                f"a `coworker restore-backup` stopped half-way in {self.root}: nothing is lost, "
                "and nothing runs here until `coworker restore-backup --finish` completes it "
                "or `coworker restore-backup --rollback` puts back what was here")

    def ensure_state(self) -> None:
        """state/ exists and is 0700; the coworker's files in it are tightened to 0600."""
        make_private_dir(self.state)
        for f in self.private_files():
            if f.is_file() and not f.is_symlink():
                tighten(f, PRIVATE_FILE)

    def ensure_dirs(self) -> None:
        self.ensure_state()
        for d in (self.inbox, self.inbox / "done", self.outbox, self.snapshots):
            make_private_dir(d)
        if not self.memory_md.exists():
            try:
                write_private(self.memory_md, MEMORY_MD_HEADER)
            except FileExistsError:  # another process made it first
                pass

    def init(self, store_url: str | None = None, coworker_id: str | None = None) -> list[str]:
        """Create config.toml, state/ and MEMORY.md where missing; return what was created. A
        new config.toml gets `coworker_id` (else a fresh one) and `[store] url` when given."""
        created = []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:
            raise not_a_folder(self.root) from e
        except OSError as e:
            raise UsageError(f"cannot create {self.root} ({e.strerror}); choose a folder you "
                             "can write, or make its parent writable") from e
        self.refuse_unfinished_restore()
        for path in (self.config_path, self.memory_md):
            if path.is_symlink() and not path.exists():
                raise UsageError(f"{path} is a link to {os.readlink(path)}, which does not "
                                 "exist; remove the link or create what it points to")
        try:
            if not self.config_path.exists():
                write_private(self.config_path, settings_mod.render_default_config(
                    coworker_id or settings_mod.new_coworker_id(),  # never one shared by default
                    store_url))
                created.append("config.toml")
            if not self.state.exists():
                created.append("state/")
            if not self.memory_md.exists():
                created.append("MEMORY.md")
            self.ensure_dirs()
            self._ensure_token()
        except OSError as e:  # permission, a read-only file system, a full disk
            raise UsageError(f"cannot write {e.filename or self.root} ({e.strerror}); make the "
                             "folder writable, or choose another") from e
        return created

    def _ensure_token(self) -> None:
        """The owner's token for `coworker serve` in state/secrets.toml (0600), made when the
        file holds none; the rest of the file is kept. A file that does not parse is left
        alone: loading the settings says what is wrong with it."""
        from .errors import ConfigError
        from .serve import token

        try:
            token.ensure(self.secrets_path)
        except ConfigError:
            pass

    def settings(self) -> settings_mod.Settings:
        return settings_mod.load(self.config_path, self.said)
