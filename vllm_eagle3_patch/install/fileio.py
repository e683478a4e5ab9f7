"""Writing files so that a crash leaves either the old or the new contents, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional

TEMPORARY_SUFFIX = ".vllm-eagle3-patch.tmp"
"""How the temporary file of a write into vLLM's tree ends: a run killed mid-write leaves it
where the next ``apply`` or ``revert`` finds it by name and removes it."""


def temporary_for(path: Path) -> Path:
    """``.<name>.vllm-eagle3-patch.tmp`` beside ``path``: one name per file, for writes made under the lock."""
    return path.parent / f".{path.name}{TEMPORARY_SUFFIX}"


def write_atomically(path: Path, data: bytes, like: Optional[Path] = None, concurrent: bool = False) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    The file keeps its permission bits; a new one takes those of ``like`` (else the temporary
    file's, 0600).  Renames within a directory are atomic on POSIX, so readers (and a process
    killed mid-way) see one version or the other.  The temporary file is :func:`temporary_for`
    ``path`` (the writer holds the lock: no other writes it), or with ``concurrent`` (a cache many
    processes write at once, outside vLLM) a unique name.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = file_mode(path) if path.exists() else (file_mode(like) if like is not None else None)
    if concurrent:
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        temporary = Path(name)
    else:
        temporary = temporary_for(path)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def sweep_temporaries(directory: Path, recursive: bool = False) -> list[Path]:
    """Remove the temporary files a killed run left in ``directory`` (and below, with ``recursive``)."""
    pattern = f".*{TEMPORARY_SUFFIX}"
    found = sorted(directory.rglob(pattern) if recursive else directory.glob(pattern))
    for path in found:
        path.unlink(missing_ok=True)
    return found


def left_temporaries(directories: Iterable[Path]) -> list[Path]:
    """The temporary files of this tool in ``directories``, for ``status`` to name (it removes nothing)."""
    return sorted({path for directory in directories for path in directory.glob(f".*{TEMPORARY_SUFFIX}")})


def file_mode(path: Path) -> Optional[int]:
    """``path``'s permission bits (None: it cannot be read)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return None


def make_directories(path: Path, like: Path) -> None:
    """``path`` and its missing parents, with ``like``'s permission bits: whoever can read the
    package can read what this tool keeps beside it."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    mode = file_mode(like)
    for directory in missing:
        if mode is not None:
            os.chmod(directory, mode)


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


def compiled_files(source: Path) -> list[Path]:
    """The cached bytecode of ``source`` (``__pycache__/<stem>.<tag>.pyc``)."""
    return sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))


def restore_bytecode(source: Path, compiled: dict[str, bytes]) -> None:
    """Put back the installer's bytecode of ``source`` (by file name), valid again for its restored text.

    A timestamp-based ``.pyc`` records the source's mtime and size; the restored source is given
    that mtime back where its size matches, so Python uses the installer's bytecode as before.
    """
    for name, data in compiled.items():
        write_atomically(source.parent / "__pycache__" / name, data, like=source)
        flags, mtime, size = (int.from_bytes(data[i : i + 4], "little") for i in (4, 8, 12))
        if len(data) >= 16 and flags == 0 and size == source.stat().st_size:
            os.utime(source, (mtime, mtime))


def drop_bytecode(source: Path) -> None:
    """Remove cached bytecode of ``source`` so Python recompiles the new text.

    Timestamp-based caches can miss a rewrite within the same second, and hash-based
    caches compiled with ``unchecked-hash`` are never re-validated.
    """
    for compiled in compiled_files(source):
        compiled.unlink(missing_ok=True)
