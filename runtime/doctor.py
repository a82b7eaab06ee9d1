"""`coworker doctor`: checks every link that fails silently, and says what to do about each.

Owns the checks (config parses; the running process uses the config on disk; state/ and its
folders are folders; the database opens, passes integrity_check and holds every table, view,
trigger and index its migrations made; the FTS indexes agree with their tables; MEMORY.md reads as entries,
as strike and the promotions need it; rituals are scheduled and reflect ran when it should have;
recall is on; logging is at a level a person sees; no key sits in a file others can read, and
the coworker's memory is private; the model answers; today's model usage against the daily
caps; each configured MCP server starts and lists its tools, and which it leaves out; each
`[[notify]]` target's secrets are set and its host answers or its command is found) and
their one-line
verdicts: ok, WARN (worth fixing, exit code still 0) or FAIL. Each check is isolated: one that
fails, or crashes, never stops the others. It never changes anything: no migration, no repair,
no write to any file; the fix is always a line the owner runs. (It does start each MCP server
once to list its tools, and stops it; it calls none of them.) What it prints passes through
`secrecy.redact`, so a key an endpoint echoes back never reaches the terminal. Its one model
call is made only below the daily caps, and counted against them (a `model_calls` telemetry
row, its one write), as every model call is.
It speaks no SQL: the database's checks and the repair commands it names are the store's
(runtime/store/health.py).

A home whose `[store] url` names a PostgreSQL database (ADR-0044) has, in the database check's
place: the server answers (`database`, one line that never holds the password), the coworker's
schema is at this code's version (`schema`; newer: one line, upgrade here; older: migrated when
the coworker next writes), the pgvector extension (`pgvector`: FAIL when `[semantic]` is on
without it), no pooler in transaction mode between (`pooling`: it breaks the runner's advisory
lock and LISTEN), and who runs the coworker (`runner`: host, pid, since when); the `fts` check
compares the full text's kept tables with a recount from the history. Every other check reads
that store, and none of them makes a schema that is not there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from . import process
from .cron import parse_cron
from .errors import ConfigError, CoworkerError, ModelError, SchemaNewer
from .home import Home
from .memory.recall import BUDGET
from .secrecy import redact, secret_values
from .settings import ENV_PREFIX, Settings, read_toml

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

    from .store import Store
    from .store.rituals import RitualRun

# A 'running' reflect row older than this is a run that was killed: reflect takes seconds to
# minutes even at a million events (docs/benchmarks.md).
STALE_RUN = timedelta(hours=6)
# A ritual whose next window after its last run passed longer ago than this was missed (by a
# loop that was down, or a scheduler that never fired), not merely pending until catch-up.
OVERDUE = timedelta(days=8)
PROBE_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)

NOT_CHECKED = "not checked: config.toml does not parse (fix that first, see the config check)"
DB_NOT_CHECKED = "not checked: the database does not open (fix that first, see the database check)"


class _NoStore(CoworkerError):
    """This home has no history yet: no SQLite file, or no schema of its coworker on the
    PostgreSQL server."""


@dataclass(frozen=True)
class Check:
    """One verdict. `detail` says what is fine when ok, and what to do when not."""

    name: str
    ok: bool
    detail: str
    warn: bool = False  # ok, but worth fixing: printed as WARN, exit code unaffected


def run_checks(home: Home, *, probe_model: bool = True) -> list[Check]:
    """Every check, in order; with probe_model False the model is not called (and not listed)."""
    settings: Settings | None = None

    def config() -> Check:
        nonlocal settings
        check, settings = _config(home)
        return check

    first: list[tuple[str, Callable[[], Check]]] = [
        ("config", config),
        ("config in use", lambda: _config_in_use(home, settings)),
        ("folders", lambda: _folders(home)),
    ]
    rest: list[tuple[str, Callable[[], Check]]] = [
        ("fts", lambda: _fts(home)),
        ("memory", lambda: _memory(home)),
        ("rituals", lambda: _rituals(home, settings)),
        ("recall", lambda: _recall(settings)),
        ("logging", lambda: _logging(home, settings)),
        ("permissions", lambda: _permissions(home)),
    ]
    if probe_model:
        rest.append(("model", lambda: _model(settings, home)))
    rest.append(("spending", lambda: _spending(home, settings)))
    rest.append(("semantic", lambda: _semantic(home, settings)))
    checks = [_guarded(name, fn) for name, fn in first]
    checks += _guarded_all("database", lambda: _store_checks(home, settings))
    checks += [_guarded(name, fn) for name, fn in rest]
    return (checks + _guarded_all("mcp", lambda: _mcp(settings))  # one check a server
            + _guarded_all("notify", lambda: _notify(settings))  # one a [[notify]] target
            + _guarded_all("hermes", lambda: _hermes(home, settings)))  # when installed


def _hermes(home: Home, settings: Settings | None) -> list[Check]:
    from . import hermes_setup

    return hermes_setup.checks(home, settings.serve.hermes_token if settings else None)


def render(checks: list[Check]) -> str:
    def verdict(c: Check) -> str:
        return "FAIL" if not c.ok else "WARN" if c.warn else "ok  "

    return redact("\n".join(f"{verdict(c)} {c.name}: {c.detail}" for c in checks))


def exit_code(checks: list[Check]) -> int:
    return 0 if all(c.ok for c in checks) else 1


def _guarded(name: str, fn: Callable[[], Check]) -> Check:
    return _guarded_all(name, lambda: [fn()])[0]


def _guarded_all(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    try:
        return fn()
    except CoworkerError as e:  # already says what to do
        return [Check(name, False, str(e))]
    except Exception as e:  # a check that crashes is a failed check, never a traceback
        return [Check(name, False, f"the check itself failed ({type(e).__name__}: {e}); "
                                   "please report it")]


# the checks ----------------------------------------------------------------------------------
def _config(home: Home) -> tuple[Check, Settings | None]:
    name = "config"
    if not home.config_path.exists():
        return Check(name, False, f"no config.toml in {home.root}: run `coworker init` there"), None
    try:
        settings = home.settings()
    except ConfigError as e:
        return Check(name, False, str(e)), None
    try:
        settings.role_text(home.root)  # a role file that went missing fails every model turn
    except ConfigError as e:
        return Check(name, False, str(e)), settings
    return Check(name, True, f"{home.config_path} parses"), settings


def _config_in_use(home: Home, settings: Settings | None) -> Check:
    name = "config in use"
    pid = process.running_pid(home)
    if pid is None:
        return Check(name, True, "not running")
    if settings is None:
        # The loop keeps its last good config after a bad edit, and it records the bad file's
        # hash as seen, so run.json alone would call the bad file "in use".
        return Check(name, False, f"the running coworker (pid {pid}) keeps its last good config "
                                  "because config.toml on disk does not parse: fix config.toml")
    run = process.read_runfile(home)
    in_use = process.config_in_use(home, run)
    if in_use:
        return Check(name, True, f"the running coworker (pid {pid}) uses config.toml as on disk")
    if in_use is None:
        return Check(name, False, f"cannot tell which config the running coworker (pid {pid}) "
                                  f"uses: {home.runfile} has no config hash; run doctor again in "
                                  "a few seconds, or restart: `coworker stop && coworker start`")
    nxt = run.get("next_tick_at")
    when = f"at its next tick ({nxt[:19]}Z)" if nxt else "at its next tick"
    return Check(name, False, f"the running coworker (pid {pid}) runs on an older config.toml; it "
                              f"applies the file on disk {when}: `coworker tell` wakes it now, "
                              "or restart it: `coworker stop && coworker start`")


def _damaged(home: Home, why: str) -> str:
    from .store.health import recover_command

    fresh = home.db_path.with_name("recovered.db")
    return (f"database {home.db_path} is damaged ({why}): stop the coworker, keep a copy of the "
            f"file, and recover what SQLite can: {recover_command(home.db_path, fresh)} "
            "(then move recovered.db into its place)")


def _store_checks(home: Home, settings: Settings | None) -> list[Check]:
    """The database check of a SQLite home; on PostgreSQL its lines (`_pg_store`)."""
    url = home.store_url()
    if url is None:
        return [_database(home)]
    return _pg_store(home, url, settings)


@contextlib.contextmanager
def _checking(home: Home, *, readonly: bool = True) -> Iterator[Store]:
    """This home's store for a check: never migrated nor created (_NoStore when it has no
    history yet), any failure of its engine a StoreError."""
    from .store import health

    url = home.store_url()
    if url is None:
        if not home.db_path.exists():
            raise _NoStore(f"no database yet at {home.db_path}")
        with health.checking(home.db_path, readonly=readonly) as store:
            yield store
        return
    from .store.pg_schema import NotYet

    try:
        with health.checking_pg(url, home.settings().coworker.id or "") as pg:
            yield pg
    except NotYet as e:
        raise _NoStore(str(e)) from e


def _has_history(home: Home) -> bool:
    """Whether this home has a history yet (on PostgreSQL: its coworker's schema exists)."""
    try:
        with _checking(home):
            return True
    except _NoStore:
        return False


def _database(home: Home) -> Check:
    from .store import health

    name = "database"
    if not home.db_path.exists():
        pid = process.running_pid(home)
        if pid is not None:
            return Check(name, False, f"{home.db_path} is gone but the coworker (pid {pid}) is "
                                      "running: it writes to a deleted file and loses all of it; "
                                      "restart it now: `coworker stop && coworker start`")
        return Check(name, True, f"no database yet at {home.db_path} (created when the coworker "
                                 "first runs)")
    try:
        with health.checking(home.db_path) as store:
            result = store.integrity_check()
            missing = health.missing(store) if result == "ok" else []
    except CoworkerError as e:
        if not health.damaged(str(e.__cause__ or e)):
            raise  # locked, unreadable: its own text says what to do
        # StoreError's text for damage points at doctor; here is the "more" it promises.
        return Check(name, False, _damaged(home, str(e.__cause__ or e)))
    if result != "ok":
        if health.only_indexes(result):  # only an index disagrees with its table: rebuild it
            return Check(name, False, f"database {home.db_path} has an index out of step with "
                                      f"its table (integrity_check: {result}): rebuild the "
                                      f"indexes: {health.reindex_command(home.db_path)}")
        return Check(name, False, _damaged(home, f"integrity_check: {result}"))
    if missing:
        return Check(name, False, f"database {home.db_path} lacks what its migrations made: "
                                  f"{', '.join(missing)}; the commands that use them fail: "
                                  "bring back a backup: `coworker restore-backup FOLDER`")
    return Check(name, True, f"{home.db_path} opens and passes integrity_check")


def _pg_store(home: Home, url: str, settings: Settings | None) -> list[Check]:
    """A home on PostgreSQL: the server answers (database), the coworker's schema is at this
    code's version (schema), pgvector (semantic channel), no pooler in transaction mode
    (pooling), and who runs this coworker (runner). Reads only: a schema not there yet is
    not made."""
    from .store import health
    from .store.pg_schema import NotYet

    where = home.store_where()
    cid = home.settings().coworker.id or ""
    try:
        with health.checking_pg(url, cid) as store, health.checking_pg(url, cid) as other:
            return [Check("database", True, f"{where} answers (PostgreSQL "
                                            f"{store.raw.info.server_version // 10000})"),
                    _pg_schema(store), _guards(store), _pgvector(store, settings),
                    _pooling(store, other), _runner(store)]
    except NotYet:
        return [Check("database", True, f"{where} answers; no coworker {cid!r} there yet (its "
                                        "schema is made when the coworker first runs)")]
    except SchemaNewer as e:
        return [Check("database", True, f"{where} answers"), Check("schema", False, str(e))]


def _pg_schema(store: Any) -> Check:
    from .store import health

    found, known = health.schema_version(store)
    line = f"schema {store.schema} at version {found} (this code knows {known})"
    if found < known:
        return Check("schema", True, f"{line}: migrated when the coworker next opens it to "
                                     "write (`coworker run`, `coworker tell`)", warn=True)
    return Check("schema", True, line)


def _guards(store: Any) -> Check:
    from .store import health

    missing, disabled = health.guards(store)
    if not missing and not disabled:
        return Check("guards", True, f"the {len(health.expected_triggers())} triggers that keep "
                                     "history append-only, rollups sealed and the full text "
                                     "current are in place")
    said = "; ".join(part for part in (
        f"missing: {', '.join(missing)} (restore the schema from a backup: `coworker "
        "restore-backup`)" if missing else "",
        f"disabled: {', '.join(disabled)} (the schema's owner runs ALTER TABLE <table> ENABLE "
        "TRIGGER <trigger> for each)" if disabled else "") if part)
    return Check("guards", False, f"the database no longer enforces what it promises: {said}")


def _pgvector(store: Any, settings: Settings | None) -> Check:
    from .store import health

    name = "pgvector"
    version, available = health.pgvector(store)
    if version is not None:
        return Check(name, True, f"pgvector {version} (the semantic channel's vectors)")
    how = ("a superuser runs CREATE EXTENSION vector in this database" if available else
           "install pgvector on the server, then a superuser runs CREATE EXTENSION vector in "
           "this database")
    if settings is not None and settings.semantic.enabled:
        return Check(name, False, f"[semantic] enabled, but the semantic channel needs the "
                                  f"pgvector extension, which this database lacks: {how}")
    return Check(name, True, f"not in this database; only the semantic channel needs it "
                             f"([semantic] is off): to turn it on, {how}")


def _pooling(store: Any, other: Any) -> Check:
    from .store import health

    pids = health.pooled_pids(store, other)
    if health.pooled(pids):
        seen = (f"a connection waited {health.POOL_WAIT_S:g} s for a server while another was "
                "in a transaction" if health.WAITED in pids else
                f"one connection was answered by {len(set(pids))} server processes")
        return Check("pooling", False, f"{seen}: a pooler in transaction mode (PgBouncer "
                                       "pool_mode = transaction), which breaks the runner's "
                                       "advisory lock and LISTEN: " + health.POOLING_FIX)
    return Check("pooling", True, "one server process a connection (no pooler in transaction "
                                  "mode)")


def _runner(store: Any) -> Check:
    from .store import pg_runner

    held = pg_runner.current(store)
    if held is None:
        return Check("runner", True, "not running (never run on this database)")
    if held.holding:
        return Check("runner", True, f"runs on {held.host} (pid {held.pid}, since {held.since})")
    return Check("runner", True, f"not running; last ran on {held.host} (pid {held.pid}, since "
                                 f"{held.since})")


def _pg_fts(home: Home) -> Check:
    """pg_fts' kept tables against a recount from the history."""
    from .store import health

    name = "fts"
    try:
        with _checking(home) as store:
            verdicts = health.fts_verdicts(store)
    except _NoStore:
        return Check(name, True, "no database yet, so no index to check")
    except CoworkerError:
        return Check(name, False, DB_NOT_CHECKED)
    bad = [f"{v.table} ({v.detail})" for v in verdicts if v.state != "ok"]
    if bad:
        return Check(name, False, f"the full text's kept tables are out of step with the history, "
                                  f"so searches miss or rank wrongly: {'; '.join(bad)}; rebuild "
                                  f"them: {health.REBUILD_FTS_COMMAND}")
    return Check(name, True, f"the full text's kept tables ({', '.join(v.table for v in verdicts)}"
                             ") agree with the history")


def _folders(home: Home) -> Check:
    """state/ and the folders in it (inbox, inbox/done, outbox, snapshots) are folders, or not
    there yet (made when the coworker runs): a file or a dangling link in one's place makes
    every command that needs the home refuse."""
    import os

    name = "folders"
    bad = []
    for path in (home.state, home.inbox, home.inbox / "done", home.outbox, home.snapshots):
        q = shlex.quote(str(path))
        if path.is_symlink() and not path.exists():
            bad.append(f"{path} is a link to {os.readlink(path)}, which does not exist: remove "
                       f"the link (rm {q}) or create what it points to")
        elif path.exists() and not path.is_dir():
            bad.append(f"{path} is a file, not a folder: move it aside (mv {q} {q}.aside)")
    if bad:
        return Check(name, False, "; ".join(bad) + "; until then the commands that need the "
                                  "home refuse")
    return Check(name, True, "state/, state/inbox, state/inbox/done, state/outbox and "
                             "state/snapshots are folders (or made when the coworker runs)")


def _fts(home: Home) -> Check:
    from .store import health

    name = "fts"
    if home.store_url() is not None:
        return _pg_fts(home)
    if not home.db_path.exists():
        return Check(name, True, "no database yet, so no index to check")
    # FTS5's integrity-check is spelled as an INSERT, so it needs a read-write connection; it
    # writes nothing. Never migrated: doctor changes nothing.
    try:
        with health.checking(home.db_path, readonly=False) as store:
            verdicts = health.fts_verdicts(store)
    except CoworkerError:
        return Check(name, False, DB_NOT_CHECKED)
    bad = []
    for v in verdicts:
        if v.state == "damaged":
            return Check(name, False, DB_NOT_CHECKED)
        if v.state == "busy":  # another writer: not checked
            return Check(name, False, f"not checked: the database is busy ({v.detail}); run "
                                      "`coworker doctor` again when the import or other writer "
                                      "is done")
        if v.state == "out_of_sync":
            bad.append(f"{v.table} is out of sync with its table ({v.detail}), so searches "
                       f"miss or invent matches: rebuild the index: "
                       f"{health.fts_rebuild_command(home.db_path, v.table)}")
    if bad:
        return Check(name, False, "; ".join(bad))
    return Check(name, True, "events_fts and rollups_fts agree with their tables")


def _memory(home: Home) -> Check:
    """MEMORY.md reads as entries: a line that looks like an entry but is not (a bad id, an id
    used twice, bad sources, bytes that are not UTF-8) makes strike and every promotion
    refuse, so it is a failure here too, with the line number they give."""
    from .memory.memorymd import MemoryFile, MemoryFileError

    name = "memory"
    path = home.memory_md
    if not path.exists():
        return Check(name, True, f"no MEMORY.md yet at {path} (created when the coworker first "
                                 "runs)")
    try:
        memory = MemoryFile.load(path)
    except MemoryFileError as e:
        return Check(name, False, f"{e}; until then `coworker strike` and `coworker "
                                  "promotions approve` refuse, and reflect proposes no "
                                  "promotions")
    n = len(memory.entries)
    size = len(path.read_text(encoding="utf-8"))
    return Check(name, True, f"MEMORY.md reads: {n} {'entry' if n == 1 else 'entries'}, "
                             f"{size:,} characters")


def _parse_ts(ts: str) -> datetime:
    when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _rituals(home: Home, settings: Settings | None, now: datetime | None = None) -> Check:
    from .scheduler import definitions
    from .store import rituals as rr

    name = "rituals"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    now = now or datetime.now(UTC)
    tz = settings.coworker.timezone
    defs = definitions(settings)
    for d in defs:
        try:
            parse_cron(d.cron, tz)
        except ValueError as e:
            return Check(name, False, f"ritual {d.name}: cron {d.cron!r} does not parse in {tz} "
                                      f"({e}): fix it under [rituals] in config.toml")
    reflect = next(d for d in defs if d.name == "reflect")
    trigger = parse_cron(reflect.cron, tz)
    nxt_now = trigger.get_next_fire_time(None, now.astimezone(ZoneInfo(tz)))
    upcoming = nxt_now.astimezone(UTC).isoformat(timespec="minutes") if nxt_now else "never"
    scheduled = f"{len(defs)} ritual(s) scheduled; reflect ({reflect.cron}, {tz})"
    try:
        with _checking(home) as store:
            last = rr.last(store, "reflect")
    except _NoStore:
        return Check(name, True, f"{scheduled}: no database yet; next window {upcoming}")
    except CoworkerError:
        return Check(name, False, DB_NOT_CHECKED)
    if last is None:
        return Check(name, True, f"{scheduled}: not registered yet (the loop registers it when it "
                                 f"first starts); next window {upcoming}")
    return _reflect_ran(last, trigger, tz, now, scheduled) or Check(
        name, True, f"{scheduled}: {_last_run(last)}; next window {upcoming}")


def _last_run(last: RitualRun) -> str:
    from .scheduler import REGISTERED

    return ("never run yet" if last.status == REGISTERED
            else f"last run {last.started_at} {last.status}")


def _reflect_ran(last: RitualRun, trigger: CronTrigger, tz: str, now: datetime,
                 scheduled: str) -> Check | None:
    """The rituals check when reflect's last run says something is wrong (or that it runs
    now); None when it ran as it should."""
    from .scheduler import REGISTERED

    name = "rituals"
    started = _parse_ts(last.started_at)
    if last.status == "running":
        if now - started > STALE_RUN:
            return Check(name, False, f"reflect started at {last.started_at} and never finished "
                                      "(the process was killed mid-run?): run it again with "
                                      "`coworker reflect`")
        return Check(name, True, f"{scheduled}: running now, since {last.started_at}")
    due = trigger.get_next_fire_time(None, started.astimezone(ZoneInfo(tz)))
    if due is None or now - due <= OVERDUE:
        return None
    what = (f"has never run since it was scheduled on {last.started_at}"
            if last.status == REGISTERED else f"last ran {last.started_at} ({last.status})")
    return Check(name, False, f"reflect {what} and was due {due.astimezone(UTC):%Y-%m-%d %H:%M}Z"
                              f" ({(now - due).days} days ago); nobody ran it: start the coworker "
                              "(`coworker start` catches up at once) or run `coworker reflect`")


def _where_set(section: str, key: str, fix: str) -> str:
    """How to change a setting: the environment variable when one overrides config.toml."""
    import os

    env = f"{ENV_PREFIX}{section.upper()}__{key.upper()}"
    if env in os.environ:
        return f"unset the environment variable {env} (it says {os.environ[env]})"
    return f"set {fix} under [{section}] in config.toml"


def _recall(settings: Settings | None) -> Check:
    """WARN when recall is "off" or "dry-run": the model then works without its long memory."""
    name = "recall"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    mode = settings.recall.mode
    if mode == "on":
        return Check(name, True, f"on: up to {BUDGET.max_items} recalled item(s) per "
                                 "model call")
    what = ("nothing from the long memory reaches the model" if mode == "off" else
            "what it would recall is only logged, never given to the model")
    fix = _where_set("recall", "mode", 'mode = "on"')
    return Check(name, True, f'[recall] mode = "{mode}": {what}; to give it its memory back, '
                             f"{fix}", warn=True)


def _logging(home: Home, settings: Settings | None) -> Check:
    import os

    name = "logging"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    level = settings.logging.level
    if logging.getLevelName(level) > logging.WARNING:
        env = f"{ENV_PREFIX}LOGGING__LEVEL"
        where = (f"unset the environment variable {env} (it says {os.environ[env]})"
                 if env in os.environ else 'set level = "INFO" under [logging] in config.toml')
        return Check(name, False, f"log level {level} hides the warnings that matter (a missed "
                                  f"ritual, a bad config edit, model retries): {where}")
    path = home.log_path
    if path.exists():
        try:
            with path.open("a", encoding="utf-8"):  # append mode: opens, writes nothing
                pass
        except OSError as e:
            return Check(name, False, f"cannot write {path} ({e.strerror}): the running "
                                      "coworker's log goes nowhere; fix its permissions "
                                      f"(chmod u+w {shlex.quote(str(path))}) or move it aside")
    elif home.state.exists() and not os.access(home.state, os.W_OK):
        return Check(name, False, f"cannot create {path}: {home.state} is not writable; fix its "
                                  "permissions")
    return Check(name, True, f"level {level}, to {path}")


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _key_file(path: Path, label: str, is_secrets_file: bool) -> str | None:
    """The FAIL line when `path` holds a key and group or others may read it, else None."""
    mode = _mode(path)
    if mode is None or not mode & 0o044:
        return None
    try:
        data = read_toml(path, label)
    except CoworkerError:
        data = None  # unreadable or not TOML: the config check says so
    if data is None:
        holds = is_secrets_file  # a secrets file is presumed to hold secrets
    else:
        holds = bool(data) if is_secrets_file else any(True for _ in secret_values(data))
    if not holds:
        return None
    q = shlex.quote(str(path))
    where = "a key" if not is_secrets_file else "secrets"
    fix = (f"chmod 600 {q}" if is_secrets_file else
           f"chmod 600 {q}, or better move it to state/secrets.toml (mode 600) or the "
           "ANTHROPIC_API_KEY environment variable")
    return (f"{label} holds {where} and is readable by group/other (mode {mode:04o}): {fix}")


def _permissions(home: Home) -> Check:
    """FAIL: a key in a file others can read. WARN: state/ not 0700, or the coworker's memory
    (MEMORY.md, the database, logs, run.json) readable by group/other."""
    name = "permissions"
    fails = [line for line in (
        _key_file(home.config_path, "config.toml", False),
        _key_file(home.secrets_path, "state/secrets.toml", True),
    ) if line]
    warning = _loose(home)
    if fails:
        return Check(name, False, "; ".join(fails + ([f"also {warning}"] if warning else [])))
    if warning:
        return Check(name, True, warning, warn=True)
    return Check(name, True, "no key in a file others can read; state/ is 0700 and the "
                             "coworker's files are yours alone")


def _loose(home: Home) -> str:
    """What of the coworker's memory group or others may read, and the chmod that fixes it;
    "" when nothing."""
    mode = _mode(home.state)
    loose_dir = f"state/ ({mode:04o})" if mode is not None and mode & 0o077 else None
    loose_files = _loose_files(home)
    if not loose_dir and not loose_files:
        return ""
    what = ([loose_dir] if loose_dir else []) + [
        f"{p.relative_to(home.root)} ({m:04o})" for p, m in loose_files]
    fixes = [f"chmod 700 {shlex.quote(str(home.state))}"] if loose_dir else []
    if loose_files:
        fixes.append("chmod 600 " + " ".join(shlex.quote(str(p)) for p, _ in loose_files))
    return (f"readable by group/other: {', '.join(what)}; what the coworker knows is "
            f"yours alone: {' && '.join(fixes)}")


def _loose_files(home: Home) -> list[tuple[Path, int]]:
    """The coworker's private files (not secrets.toml: the key check has it) that group or
    others may read, with their modes."""
    loose = []
    for path in [home.memory_md, *home.private_files()]:
        if path == home.secrets_path or not path.is_file():
            continue
        mode = _mode(path)
        if mode is not None and mode & 0o044:
            loose.append((path, mode))
    return loose


def _model(settings: Settings | None, home: Home | None = None) -> Check:
    """One tiny model call, unless a daily cap is reached; the call counts against the caps."""
    from .model import Model
    from .store import usage

    name = "model"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    cfg = settings.model
    if cfg.provider == "none":
        return Check(name, True, 'no model configured ([model] provider = "none"): inputs are '
                                 "recorded only")
    if not cfg.resolved_api_key():
        return Check(name, True, "no model configured (no API key; set ANTHROPIC_API_KEY or "
                                 "[model] api_key to give it one): inputs are recorded only")
    with contextlib.suppress(Exception):  # no database yet: nothing spent today either
        if home is not None:
            with _checking(home) as store:
                if capped := usage.cap_reason(store, cfg):
                    return Check(name, True, f"not called: [model] {capped}; the coworker "
                                             "makes no model call until 00:00 UTC", warn=True)
    probe = cfg.model_copy(update={"max_retries": 0,
                                   "timeout_s": min(cfg.timeout_s, PROBE_TIMEOUT_S)})
    where = f"{cfg.name} at {cfg.base_url or 'api.anthropic.com'}"

    async def ping() -> None:
        model = Model(probe)
        try:
            await model.create(system=[], tools=[], messages=[{"role": "user", "content": "ping"}])
        finally:
            await model.close()

    t0 = time.monotonic()
    try:
        asyncio.run(ping())
    except ModelError as e:
        _count_probe(home)
        return Check(name, False, f"{where}: {e}")
    _count_probe(home)
    return Check(name, True, f"{where} answered in {time.monotonic() - t0:.2f} s")


def _count_probe(home: Home | None) -> None:
    """doctor's one call counts against the daily caps, as every model call does."""
    from .store import usage

    if home is None or not _has_history(home):
        return
    try:
        with home.open_store() as store:
            usage.record_calls(store, "doctor's model check", 1)
    except Exception as e:  # a busy or damaged database: the check itself said what it could
        log.warning("doctor's model call was not counted (%s: %s)", type(e).__name__, e)


def _spending(home: Home, settings: Settings | None) -> Check:
    """Today's model usage (since 00:00 UTC) against [model] daily_calls and daily_tokens;
    WARN when a cap is reached (the loop then makes no model call until tomorrow)."""
    from .store import usage

    name = "spending"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    cfg = settings.model
    used = usage.Usage()
    try:
        with _checking(home) as store:
            used = usage.today(store)
    except _NoStore:
        pass
    except CoworkerError:
        return Check(name, False, DB_NOT_CHECKED)

    def against(n: int, cap: int, unit: str, key: str) -> str:
        return (f"{n:,} of {cap:,} {unit}" if cap else
                f"{n:,} {unit} (no cap: [model] {key} = 0)")

    today = (f"today (UTC): {against(used.calls, cfg.daily_calls, 'calls', 'daily_calls')}, "
             f"{against(used.tokens, cfg.daily_tokens, 'tokens', 'daily_tokens')}")
    reached = [key for key, n, cap in (("daily_calls", used.calls, cfg.daily_calls),
                                       ("daily_tokens", used.tokens, cfg.daily_tokens))
               if cap and n >= cap]
    if reached:
        caps = " and ".join(f"[model] {k}" for k in reached)
        return Check(name, True, f"{today}: {caps} reached, so no model calls until 00:00 UTC "
                                 "and inputs wait; to go on today raise it in config.toml",
                     warn=True)
    return Check(name, True, today)


def _semantic(home: Home, settings: Settings | None) -> Check:
    """When the semantic channel is on, it embeds: one short text, within its timeout; and
    the history has vectors of its model (none at all, after turning the channel on, means
    nothing is found by meaning until a backfill)."""
    from .memory import embed as em
    from .store import vectors as vs
    from .store.events import BOOKKEEPING_KINDS

    name = "semantic"
    if settings is None:
        return Check(name, False, NOT_CHECKED)
    embedder = em.make_embedder(settings.semantic)
    if embedder is None:
        return Check(name, True, "off")
    vec, ms, why = em.timed_embed(embedder, "doctor ping")
    if vec is None:
        return Check(name, False, f"{embedder.name} does not embed ({why}); recall falls back "
                                  "to lexical until it does: fix [semantic] or set enabled = false")
    from .memory.nearest import calibrated

    unembedded: object = False  # no database yet: the database check says so
    with contextlib.suppress(_NoStore), _checking(home) as store:
        after = vs.window_start(store, em.WINDOW)
        have = vs.count(store, embedder.name, "event", after)
        unembedded = not have and vs.missing_events(store, embedder.name,
                                                    sorted(BOOKKEEPING_KINDS), after, page=1)
    if unembedded:
        return Check(name, True, f"{embedder.name} embeds ({len(vec)} dimensions, {ms:.0f} ms), "
                     "but no event has a vector of it yet, so nothing is found by meaning: run "
                     "`coworker embed --backfill` (reflect then embeds new events weekly)",
                     warn=True)
    if not calibrated(embedder.name):
        # the walk's semantic entry has coefficients for MiniLM and mpnet (memory.nearest)
        return Check(name, True, f"{embedder.name} embeds ({len(vec)} dimensions, {ms:.0f} ms)"
                     "; the walk's semantic confidence is calibrated for all-MiniLM-L6-v2 and "
                     "all-mpnet-base-v2 only, so it uses MiniLM's: fit this model's with "
                     "`coworker eval paraphrase --channels hybrid --half all --calibrate`",
                     warn=True)
    return Check(name, True, f"{embedder.name} embeds ({len(vec)} dimensions, {ms:.0f} ms)")


def _mcp(settings: Settings | None) -> list[Check]:
    """One check a configured MCP server: it starts (once, no retry) and lists its tools, by
    side-effect class; or the reason it cannot, and where to fix it."""
    name = "mcp"
    if settings is None:
        return [Check(name, False, NOT_CHECKED)]
    section = settings.mcp
    if not section.servers:
        return [Check(name, True, "no MCP servers configured")]
    from .hands import SideEffect
    from .hands.server import left_out_line
    from .hands.survey import survey

    checks = []
    reports = asyncio.run(survey(section, live=False))
    classes = {t.name: t.side_effect for r in reports for t in r.tools}
    for w in section.watch:  # a watch only reads: `coworker run` refuses one that does not
        full = f"{w.server}__{w.tool}"
        if classes.get(full, SideEffect.READ) is not SideEffect.READ:
            checks.append(Check(name, False, redact(
                f"[[mcp.watch]] on {full}: {w.server} offers {w.tool} with side effects, and a "
                "watch only reads; watch a read-only tool (or list it in that server's "
                "read_only if it only reads)")))
    for r in reports:
        if not r.ok:
            checks.append(Check(name, False, redact(
                f"{r.name}: cannot start ({r.reason}); its tools are unavailable to the "
                f'coworker: fix command (or url), args and env of the [[mcp.servers]] table '
                f'with name = "{r.name}" in config.toml, then `coworker mcp-tools` to try '
                "again")))
            continue
        disabled = r.count(SideEffect.DISABLED)
        tools = (f"{r.name}: {len(r.tools) - disabled} tools ({r.count(SideEffect.READ)} "
                 f"read-only, {r.count(SideEffect.SIDE_EFFECT)} side effects, "
                 f"{r.count(SideEffect.APPROVE)} wait for approval)"
                 + (f"; {disabled} disabled" if disabled else ""))
        if r.left_out:
            checks.append(Check(name, True, redact(
                f"{tools}; {left_out_line(r.left_out)}: the model cannot use those; list fewer "
                f'(`disabled` of the [[mcp.servers]] table with name = "{r.name}"), or fix '
                "the server"), warn=True))
            continue
        checks.append(Check(name, True, tools))
    return checks


def _notify(settings: Settings | None) -> list[Check]:
    """One check a [[notify]] target, sending nothing: its secrets are set, a webhook's host
    answers (printed as scheme and host only: the path is a credential), a command is found."""
    if settings is None:
        return [Check("notify", False, NOT_CHECKED)]
    if not settings.notify:
        return [Check("notify", True, "no [[notify]] targets (replies wait in `coworker replies`)")]
    from .notify.senders import describe

    checks = []
    for t in settings.notify:
        try:
            ok, warn, detail = describe(t, settings.secrets)
        except ConfigError as e:
            ok, warn, detail = False, False, str(e)
        checks.append(Check("notify", ok, redact(f"{t.name}: {detail}"), warn=warn))
    return checks
