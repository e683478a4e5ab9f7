"""Writing files so that a crash leaves either the old or the new contents, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    The file keeps its permission bits.  Renames within a directory are atomic on POSIX,
    so readers (and a process killed mid-way) see one version or the other.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def drop_bytecode(source: Path) -> None:
    """Remove cached bytecode of ``source`` so Python recompiles the new text.

    Timestamp-based caches can miss a rewrite within the same second, and hash-based
    caches compiled with ``unchecked-hash`` are never re-validated.
    """
    cache = source.parent / "__pycache__"
    for compiled in cache.glob(f"{source.stem}.*.pyc"):
        compiled.unlink(missing_ok=True)
