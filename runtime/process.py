"""The running process seen from outside: pidfile lock, run.json, signals, detaching.

Owns the single-instance guarantee (an exclusive flock on state/coworker.pid held for the life
of the loop, so a stale pidfile never blocks and a reused pid never fools us), reading and
writing run.json atomically, waking the loop (SIGUSR1) and stopping it (SIGTERM), and spawning
a detached `coworker run`. It never touches the database.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from .errors import AlreadyRunning, NotRunning, UsageError
from .files import is_regular_or_absent, read_regular
from .home import Home

WAKE_SIGNAL = signal.SIGUSR1


ACQUIRE_GRACE = 1.0  # seconds a start waits for a lock that is only being looked at


class PidLock:
    """Held by the running loop. `acquire()` raises AlreadyRunning when another process has it."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._fd: int | None = None

    def acquire(self) -> None:
        self.home.state.mkdir(parents=True, exist_ok=True)
        _regular_pidfile(self.home)
        fd = os.open(self.home.pidfile, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        # a moment's grace: `held()` probes with a shared lock, and a loop letting go empties
        # the file before it unlocks; a live loop holds on past it
        deadline = time.monotonic() + ACQUIRE_GRACE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as e:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise AlreadyRunning(
                        f"a coworker is already running here (pid {read_pid(self.home)}): "
                        "`coworker stop` first, or `coworker status` to see it") from e
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None


def read_pid(home: Home) -> int | None:
    try:
        text = read_regular(home.pidfile, 64).decode("ascii").strip()
        return int(text) if text else None
    except (OSError, ValueError):  # absent, not a regular file, not a pid
        return None


def _regular_pidfile(home: Home) -> None:
    if not is_regular_or_absent(home.pidfile):  # a FIFO would block an open for ever
        raise UsageError(f"{home.pidfile} is not a regular file (a pipe, device or folder); "
                         "remove it (no coworker can hold it) and try again")


def held(home: Home) -> bool:
    """Whether a process holds this home's lock, whatever the pidfile says (a loop letting go
    empties the file before it unlocks)."""
    if not home.pidfile.exists():
        return False
    _regular_pidfile(home)
    fd = os.open(home.pidfile, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def running_pid(home: Home) -> int | None:
    """The pid of the live loop for this home, or None. Truth is the lock, not the file."""
    return read_pid(home) if held(home) else None


def write_runfile(home: Home, data: dict[str, Any]) -> None:
    tmp = home.runfile.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, home.runfile)


def read_runfile(home: Home) -> dict[str, Any]:
    """What the running loop last wrote of itself; {} when there is none, or when the file
    holds anything but the object the loop writes (it rewrites the file at its next tick)."""
    try:
        data = json.loads(read_regular(home.runfile).decode("utf-8"))
    except (OSError, ValueError):  # absent, not a regular file, not JSON
        return {}
    return data if isinstance(data, dict) else {}


def wake(home: Home) -> int | None:
    """Signal the running loop to tick now; return its pid, or None when none runs."""
    pid = running_pid(home)
    if pid is None:
        return None
    try:
        os.kill(pid, WAKE_SIGNAL)
    except ProcessLookupError:
        return None
    return pid


def stop(home: Home, timeout: float = 30.0) -> int:
    """SIGTERM the running loop and wait for it to let go of the pidfile; return its pid."""
    pid = running_pid(home)
    if pid is None:
        raise NotRunning(f"no coworker is running in {home.root}; `coworker start` starts one")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not held(home):  # the lock, not the pid: the file is emptied before the unlock
            return pid
        time.sleep(0.05)
    raise NotRunning(
        f"coworker (pid {pid}) did not stop within {timeout:.0f} s; it may be in a long model "
        f"call: wait, or `kill -9 {pid}` (nothing is lost: every step is already written)"
    )


def spawn_detached(home: Home, args: list[str], timeout: float = 15.0) -> int:
    """Start `python -m runtime.entry run ...` in a new session, logs in state/; return its pid."""
    if (pid := running_pid(home)) is not None:
        raise AlreadyRunning(f"a coworker is already running here (pid {pid}): `coworker stop` "
                             "first, or `coworker status` to see it")
    home.state.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COWORKER_HOME=str(home.root))
    with open(home.out_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.entry", "run", "--detached", *args],
            cwd=home.root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NotRunning(
                f"the coworker exited at once (code {proc.returncode}); see {home.log_path} "
                f"and {home.out_path}"
            )
        if running_pid(home) == proc.pid:
            return proc.pid
        time.sleep(0.05)
    raise NotRunning(f"the coworker did not come up within {timeout:.0f} s; see {home.log_path}")


def uptime_s(runfile: dict[str, Any]) -> float | None:
    started = runfile.get("started_monotonic_epoch")
    return None if started is None else max(0.0, time.time() - float(started))


def config_rejected(home: Home, runfile: dict[str, Any]) -> bool:
    """Whether config.toml on disk is an edit the running loop rejected as invalid."""
    from .settings import file_hash

    rejected = runfile.get("rejected_config_hash")
    return rejected is not None and rejected == file_hash(home.config_path)


def config_in_use(home: Home, runfile: dict[str, Any]) -> bool | None:
    """Whether the running loop applied the config.toml now on disk (None: unknown)."""
    from .settings import file_hash

    running = runfile.get("config_hash")
    if running is None:
        return None
    return running == file_hash(home.config_path)
