"""Logging for the running loop: a rotating file in state/ and, in the foreground, stderr.

Owns handler setup (and `teardown`, for a caller that runs the CLI in its own process, as
the tests do) and the JSON line format (`--log-format json` / [logging]
format). Nothing here decides what to log. Every line passes through `secrecy.redact` after it is fully
formatted (message, arguments and traceback), on every handler `setup` installs, so a secret
the coworker knows never reaches a log. Log files are created 0600 (rotated ones keep it).
"""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import os
import sys
from datetime import UTC, datetime

from .home import PRIVATE_FILE, Home
from .secrecy import redact

MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 3


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # Redacted before encoding too: JSON escaping could hide a secret from the outer pass.
        data = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        if record.exc_info:
            data["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(data, ensure_ascii=False)


class RedactingFormatter(logging.Formatter):
    """Wraps a formatter; the whole formatted line (traceback included) goes through redact."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose files are created (and kept) 0600, whatever the umask."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
        try:
            os.fchmod(fd, PRIVATE_FILE)  # an older, looser file is tightened too
        except OSError:
            pass
        # appending text, as the descriptor was opened (a rotating handler's mode is always "a")
        return open(fd, "a", encoding=self.encoding, errors=self.errors)  # noqa: SIM115


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
NOISY = ("httpx", "httpx2", "httpcore", "anthropic", "apscheduler")
_OURS = "_coworker_handler"  # marks the handlers setup installed


def setup(home: Home, level: str = "INFO", fmt: str = "text", stderr: bool = True) -> None:
    """Send the root logger's lines to state/coworker.log (and stderr when `stderr`).

    The root logger is the coworker's: every handler on it goes first, ours from an earlier
    call and any other (e.g. the one anthropic's `basicConfig` adds under ANTHROPIC_LOG, which
    would print lines unredacted)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    inner: logging.Formatter = JsonFormatter() if fmt == "json" else logging.Formatter(
        TEXT_FORMAT)
    formatter = RedactingFormatter(inner)
    home.ensure_state()
    file_handler = PrivateRotatingFileHandler(
        home.log_path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    installed: list[logging.Handler] = [file_handler]
    if stderr:
        installed.append(logging.StreamHandler(sys.stderr))
    for h in installed:
        h.setFormatter(formatter)
        setattr(h, _OURS, True)
        root.addHandler(h)
    root.setLevel(level)
    # The HTTP client logs every request at INFO; our own lines say what matters.
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def teardown() -> None:
    """Close and remove the handlers `setup` installed (and only those)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _OURS, False):
            root.removeHandler(h)
            h.close()
