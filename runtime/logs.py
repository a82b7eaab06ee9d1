"""Logging for the running loop: a rotating file in state/ and, in the foreground, stderr.

Owns handler setup and the JSON line format (`--log-format json` / [logging] format). Nothing
here decides what to log.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from datetime import UTC, datetime

from .home import Home

MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 3


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup(home: Home, level: str = "INFO", fmt: str = "text", stderr: bool = True) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else logging.Formatter(
        TEXT_FORMAT)
    home.state.mkdir(parents=True, exist_ok=True)
    file_handler = logging.handlers.RotatingFileHandler(
        home.log_path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    file_handler.setFormatter(formatter)
    root.addHandler(file_handler)
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(formatter)
        root.addHandler(err)
    root.setLevel(level)
    # The HTTP client logs every request at INFO; our own lines say what matters.
    for noisy in ("httpx", "httpx2", "httpcore", "anthropic", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
