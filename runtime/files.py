"""Reading the small files a user may have replaced by something else: config.toml, the
secrets file, the pidfile, run.json; and replacing a small private file whole.

Only a regular file is read. It is opened without blocking (a FIFO would otherwise wait for a
writer for ever, and `/dev/zero` never ends), checked with fstat, and read up to a size. A file
is replaced through a new temporary file beside it (`replace_file`). This module knows nothing
of what the bytes mean.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

MAX_BYTES = 4 << 20  # no file of ours read this way is near this size


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a folder, not a file: it is never read."""


def read_regular(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file at `path`. FileNotFoundError when it is absent,
    NotRegularFile when it is something else, OSError (EFBIG) past `max_bytes`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise OSError(27, f"larger than {max_bytes} bytes", str(path))  # EFBIG
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise OSError(27, f"larger than {max_bytes} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def is_regular_or_absent(path: Path) -> bool:
    """Whether `path` is a regular file or nothing at all (a link is followed)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return True


def replace_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write `data` to a new file of `mode` beside `path` (never one that was there, never
    through a link), flushed to disk, then rename it over `path`: a reader sees the old file or
    the new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # whatever the umask took away
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
