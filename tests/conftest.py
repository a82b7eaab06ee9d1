"""Shared fixtures: every test gets its own coworker home (through COWORKER_HOME) and, when it
asks, a real HTTP server on 127.0.0.1 that speaks the Messages API.

`coworker(...)` runs the CLI in this process, as a fresh process would see it (an interpreter
start costs 1-3 s, and most tests only read exit codes and text); `coworker_process(...)` runs
the real command in a subprocess, for the few tests where the process is the point. Also here:
the fixed Hypothesis profile, and the check that only the slow suites carry the `slow` mark."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import settings as hypothesis_settings

from runtime.home import Home
from runtime.store import Event

from .fakeapi import FakeMessagesAPI

REPO = Path(__file__).resolve().parent.parent

# Property tests are repeatable by default (CI included): a fixed seed, no example database, and
# no per-example deadline (a loaded machine would miss it). A test's own @settings adds to
# this. HYPOTHESIS_PROFILE=explore draws fresh examples each run, by hand.
hypothesis_settings.register_profile("fixed", derandomize=True, database=None, deadline=None)
hypothesis_settings.register_profile("explore", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(autouse=True, scope="session")
def one_tls_context() -> Iterator[None]:
    """Every tick makes an HTTP client for the model, and each client loads the system's CA
    bundle into a new TLS context: 0.1-0.2 s of CPU each, about a quarter of the default suite.
    The tests speak plain HTTP to 127.0.0.1, so the verified default context the library makes
    is made once per environment (SSL_CERT_FILE, SSL_CERT_DIR) and shared, as a TLS context
    may be; any other `verify` or `cert` goes to the library as it is."""
    try:
        from httpx2._transports import default as transport
    except ImportError:  # another HTTP library under the SDK: nothing to share
        yield
        return
    make = transport.create_ssl_context
    made: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}

    def shared(verify: ssl.SSLContext | str | bool = True, cert: Any = None,
               trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return make(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in made:
            made[key] = make(verify=True, cert=None, trust_env=trust_env)
        return made[key]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(transport, "create_ssl_context", shared)
        yield


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("COWORKER_") or key.startswith("ANTHROPIC_"):
            monkeypatch.delenv(key)
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("COWORKER_HOME", str(root))
    monkeypatch.chdir(root)
    return root


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model call retried in this process backs off for hundredths of a second, not the
    product's seconds (`runtime.model.RETRY_WAIT_S`, `RETRY_MAX_WAIT_S`); a test of the waits
    sets its own. A coworker run as a subprocess keeps the product's waits."""
    monkeypatch.setattr("runtime.model.RETRY_WAIT_S", 0.01)
    monkeypatch.setattr("runtime.model.RETRY_MAX_WAIT_S", 0.05)


@pytest.fixture(autouse=True)
def inbox_settled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file dropped in the inbox is read at the very next tick: the tests that drop one and
    tick at once are about what is read, not about waiting for a writer to finish. The tests
    of that wait ask for `inbox_settle` and get the real SETTLE_S."""
    if "inbox_settle" not in request.fixturenames:
        monkeypatch.setattr("runtime.loop.inbox.SETTLE_S", 0.0)


@pytest.fixture
def inbox_settle() -> float:
    """The real settle time of the inbox (see `inbox_settled`)."""
    from runtime.loop import inbox

    return inbox.SETTLE_S


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    server = FakeMessagesAPI().start()
    yield server
    server.stop()


def write_config(root: Path, api_url: str | None = None, **sections: dict[str, Any]) -> Path:
    """A config.toml for tests: fast ticks and retries, the fake endpoint when given."""
    cfg: dict[str, dict[str, Any]] = {
        "coworker": {"tick_seconds": 1, "max_tick_seconds": 4},
        "model": {"max_retries": 3, "timeout_s": 5.0, "name": "fake-model"},
    }
    if api_url:
        cfg["model"].update({"base_url": api_url, "api_key": "test-key"})
    else:
        cfg["model"]["provider"] = "none"
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    lines = []
    for name, values in cfg.items():
        lines.append(f"[{name}]")
        for k, v in values.items():
            lines.append(f"{k} = {_toml(v)}")
        lines.append("")
    path = root / "config.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return repr(v)


@pytest.fixture(scope="session")
def new_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database as the first `Store.open` of a home makes it (every migration applied, its
    WAL checkpointed away on close), made once a worker: a home's fixture copies it in, which
    costs a millisecond where running the migrations again costs about 50."""
    from runtime.store import Store

    path = tmp_path_factory.mktemp("new-database") / "coworker.db"
    umask = os.umask(0o077)  # as the product makes it: its processes run under umask 077
    try:
        Store.open(path).close()
    finally:
        os.umask(umask)
    assert not path.with_name("coworker.db-wal").exists()
    return path


def _initialised(root: Path, new_database: Path | None, base_url: str | None = None) -> Home:
    h = Home.locate(root)
    h.init()
    write_config(root, base_url)
    if new_database is not None:
        shutil.copy(new_database, h.db_path)  # its mode too
    return h


@pytest.fixture
def bare_home(isolated_home: Path) -> Home:
    """A home as `coworker init` leaves it: no database until something opens it."""
    return _initialised(isolated_home, None)


@pytest.fixture
def home(isolated_home: Path, api: FakeMessagesAPI, new_database: Path) -> Home:
    return _initialised(isolated_home, new_database, api.url)


@pytest.fixture
def offline_home(isolated_home: Path, new_database: Path) -> Home:
    return _initialised(isolated_home, new_database)


def run_tick(loop) -> object:  # noqa: ANN001 - a runtime.loop.Loop
    """One tick of `loop` in its own event loop (the HTTP client is bound to the event loop
    that made it, so each asyncio.run makes its own and closes it)."""
    import asyncio

    async def go():  # noqa: ANN202
        loop._make_model()
        try:
            return await loop.tick()
        finally:
            if loop.model is not None:
                await loop.model.close()
    return asyncio.run(go())


def tell(home: Home, body: str) -> int:
    """An owner message as `coworker tell` records it: the event and its pending input."""
    from runtime.store import Event, Store, inputs

    with Store.open(home.db_path) as store:
        return inputs.add_message(store, Event.owner_message(body, "tell"))


def tells_at_once(home: Home, n: int, prefix: str = "at once") -> list[BaseException]:
    """`n` owner messages told from `n` threads at once; what any of them raised."""
    import threading

    errors: list[BaseException] = []

    def told(i: int) -> None:
        try:
            tell(home, f"{prefix} {i}")
        except BaseException as e:  # noqa: BLE001 - collected for the caller to assert
            errors.append(e)
    threads = [threading.Thread(target=told, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def standups(bodies: list[str], per_day: int) -> list[Event]:
    """Notes a day apart in March 2025, `per_day` of them each day ten minutes apart from 09:00:
    a history reflect seals into episodes and days (the ladders the recall tests read)."""
    return [Event(kind="note", body=b, actor="coworker", author_kind="agent",
                  ts=f"2025-03-{1 + i // per_day:02d}T{9 + (i % per_day) // 6:02d}:"
                     f"{(i % 6) * 10:02d}:00.000Z")
            for i, b in enumerate(bodies)]


def coworker(*args: str, cwd: Path | None = None, env: dict | None = None,
             input: str | None = None, timeout: float = 60,  # noqa: A002 - subprocess's name
             process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the `coworker` command in this process, as a fresh process would see it: its own
    stdin (`input`, empty by default), stdout and stderr, environment (`env` replaces the whole
    environment, as it does for a subprocess) and working folder, and no state left behind by
    earlier runs (logging, signal handlers, registered secrets, once-a-process warnings).
    Returns what subprocess.run returns. `timeout` is the subprocess's; pytest's timeout
    covers an in-process run. `process=True` is coworker_process."""
    if process:
        return coworker_process(*args, cwd=cwd, env=env, input=input, timeout=timeout)
    from runtime import cli

    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                              write_through=True)
    with _fresh_process(cwd, env or None), _console_width(), _streams(stdin, stdout, stderr):
        try:
            code = cli.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # what the interpreter does with an uncaught exception
            traceback.print_exc(file=sys.stderr)
            code = 1
    return subprocess.CompletedProcess(
        ["coworker", *args], code, _text(stdout), _text(stderr))


def stop_process(proc: subprocess.Popen[Any]) -> int:
    """SIGTERM, as a service manager stops a process, then its exit code; SIGKILL and -999
    when it has not ended within 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        return -999


def coworker_process(*args: str, cwd: Path | None = None, env: dict | None = None,
                     input: str | None = None,  # noqa: A002 - subprocess's name
                     timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real `coworker` command in a subprocess: for the tests where the process is
    the point (signals, the flock, a loop in the background, a crash)."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.entry", *args], cwd=cwd, env=env or dict(os.environ),
        input=input, capture_output=True, text=True, timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL)


def _text(stream: io.TextIOWrapper) -> str:
    """What a subprocess's pipe gives back with text=True (universal newlines)."""
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)  # as _streams made it
    raw = buffer.getvalue().decode("utf-8")
    return raw.replace("\r\n", "\n").replace("\r", "\n")


@contextlib.contextmanager
def _streams(stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> Iterator[None]:
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _console_width() -> Iterator[None]:
    """The width of runtime.render's consoles as a fresh process makes them: rich reads COLUMNS
    once, when the console is made (at import), and keeps it; without COLUMNS it asks again at
    every print. An earlier import under another COLUMNS (an xdist worker has one) is undone
    for the run and put back after."""
    from runtime import render

    consoles = (render.out, render.err)
    saved = [c._width for c in consoles]  # rich's own field: its public setter takes no None
    columns = os.environ.get("COLUMNS", "")
    try:
        for c in consoles:
            c._width = int(columns) if columns.isdigit() else None
        yield
    finally:
        for c, width in zip(consoles, saved, strict=True):
            c._width = width


# Signals the loop or the CLI may take over; a run leaves them as it found them.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


@contextlib.contextmanager
def _fresh_process(cwd: Path | None, env: dict | None) -> Iterator[None]:
    """Process-wide state as a new interpreter has it, for the length of one in-process run;
    everything is put back after."""
    from runtime import logs, secrecy

    saved_env = dict(os.environ) if env is not None else None
    saved_cwd = os.getcwd()
    saved_signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    root = logging.getLogger()
    saved_root = root.handlers[:], root.level
    saved_levels = {name: logging.getLogger(name).level for name in logs.NOISY}
    saved_secrets = set(secrecy._SECRETS)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        # no handlers: a WARNING goes to stderr through logging's last resort, as in a process
        for h in saved_root[0]:
            root.removeHandler(h)
        root.setLevel(logging.WARNING)
        secrecy._SECRETS.clear()
        yield
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
            h.close()
        for h in saved_root[0]:
            root.addHandler(h)
        root.setLevel(saved_root[1])
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        secrecy._SECRETS.clear()
        secrecy._SECRETS.update(saved_secrets)
        for sig, handler in saved_signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        os.chdir(saved_cwd)
        if saved_env is not None:
            os.environ.clear()
            os.environ.update(saved_env)


# The only files whose tests may be marked slow: the crash suite, the fault suite, the bench,
# the embedders, mypy, the files that run real MCP servers (under the loop, restarted and timed
# out by the hands, or `coworker mcp` itself over stdio), and the tests that start, signal or
# kill real `coworker` processes or hand a child process 150,000 words (issue 39 item 8: the
# default suite stays under 2 minutes on 2 CPUs).
SLOW_FILES = {"tests/test_crash.py", "tests/test_faults.py", "tests/bench/test_bench.py",
              "tests/test_semantic.py", "tests/test_hands_loop.py",
              "tests/test_reused_tool_ids.py", "tests/test_hostile_servers.py",
              "tests/test_types.py", "tests/test_eval_work.py",
              "tests/test_hands.py", "tests/test_mcp.py", "tests/test_process.py",
              "tests/test_watching.py", "tests/test_walk.py", "tests/test_import_bulk.py",
              "tests/test_config_mistakes.py", "tests/test_hands_own_state.py",
              "tests/test_approvals.py", "tests/test_user_mistakes_b.py",
              "tests/test_backup.py", "tests/test_doctor.py", "tests/test_recall.py",
              "tests/test_cli.py", "tests/test_reflect_memory.py", "tests/test_eval_paraphrase.py",
              "tests/test_gate_clauses.py", "tests/test_serve.py", "tests/test_page_browser.py",
              "tests/test_notify.py", "tests/test_talk.py", "tests/test_talk_e2e.py",
              "tests/test_two_hosts.py", "tests/test_backup_pg.py", "tests/test_hermes_real.py"}


@pytest.hookimpl(tryfirst=True)  # before -m leaves the slow ones out, so all are seen
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stray = sorted(item.nodeid for item in items if item.get_closest_marker("slow")
                   and item.nodeid.split("::")[0] not in SLOW_FILES)
    if stray:
        raise pytest.UsageError(
            "only the slow suites may be marked slow (tests/conftest.py SLOW_FILES); "
            f"marked: {', '.join(stray)}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults-seed", type=int, default=1234,
                     help="seed of the fault-injection suite (tests/test_faults.py)")


@pytest.fixture
def faults_seed(request: pytest.FixtureRequest) -> int:
    """The seed that picks the fault suite's faults and kill points (--faults-seed N)."""
    return int(request.config.getoption("--faults-seed"))
