"""Every file tallow writes goes through ``atomic_write``: all of it or none of it.

The bytes go to a temporary file in the destination's own folder (so the final
rename never crosses file systems), are flushed and fsynced, and only then is the
temporary renamed over the destination. A failure at any point (a full disk, a
short write, an exception while producing the content) removes the temporary and
leaves the previous file, if any, exactly as it was; the error is a
``FileWriteError`` naming the destination.

A destination that is a symbolic link stays one: the file it points to (through
any chain of links) is the one replaced, in its own folder, as ``open(path, "w")``
would write it.

A rename also keeps memory maps of the old file valid: a model may be read from
a file and saved back over it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from .errors import FileWriteError


def _final_mode(path: str) -> int:
    """The permissions the new file gets: the old file's, or the umask's default."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_folder(folder: str) -> None:
    # The rename itself is durable only once the folder is synced; not every
    # platform lets a folder be opened, so this is best effort.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", encoding: str | None = None):
    """Open a temporary file that replaces ``path`` when the ``with`` block succeeds.

    ``mode`` is ``"wb"`` or ``"w"`` (text, with ``encoding``, UTF-8 by default).
    On any exception the destination is untouched; an ``OSError`` (full disk,
    permission, short write) is raised again as ``FileWriteError`` naming ``path``.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode must be 'wb' or 'w', not {mode!r}")
    path = os.fspath(path)
    target = os.path.realpath(path) if os.path.islink(path) else path
    folder = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=folder)
    except OSError as e:
        raise FileWriteError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        if mode == "w":
            f = os.fdopen(fd, "w", encoding=encoding or "utf-8", newline="")
        else:
            f = os.fdopen(fd, "wb")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _final_mode(target))
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, FileWriteError):
            raise FileWriteError(
                f"cannot write {path}: {e.strerror or e} (the previous file, if any, is "
                "unchanged)") from e
        raise
    _fsync_folder(folder)


def write_bytes(path, data) -> None:
    """Write ``data`` (bytes or a buffer) to ``path`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text(path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_write(path, "w", encoding=encoding) as f:
        f.write(text)
