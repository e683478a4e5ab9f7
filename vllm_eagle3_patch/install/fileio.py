"""Writing files so that a crash leaves either the old or the new contents, never a mix."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

TEMPORARY_SUFFIX = ".vllm-eagle3-patch.tmp"
"""How the temporary file of a write into vLLM's tree ends: a run killed mid-write leaves it
where the next ``apply`` or ``revert`` finds it by name and removes it."""

STAGING_THREADS = 8
"""How many files :func:`stage_all` writes and fsyncs at once."""


def temporary_for(path: Path) -> Path:
    """``.<name>.vllm-eagle3-patch.tmp`` beside ``path``: one name per file, for writes made under the lock."""
    return path.parent / f".{path.name}{TEMPORARY_SUFFIX}"


def write_atomically(
    path: Path, data: bytes, like: Optional[Path] = None, concurrent: bool = False, durable: bool = True
) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    The file keeps its permission bits; a new one takes those of ``like`` (else the temporary
    file's, 0600).  Renames within a directory are atomic on POSIX, so readers (and a process
    killed mid-way) see one version or the other.  The temporary file is :func:`temporary_for`
    ``path`` (the writer holds the lock: no other writes it), or with ``concurrent`` (a cache many
    processes write at once, outside vLLM) a unique name.  Without ``durable`` nothing is fsynced: a cache,
    which a crash may leave empty or old, and whose readers check what they read.
    """
    _stage(path, data, like, concurrent, durable).commit()
    if durable:
        _fsync_directory(path.parent)


@dataclass(frozen=True)
class Staged:
    """A file's new contents, written and fsynced beside it, not yet in its place."""

    path: Path
    temporary: Path
    mode: Optional[int]

    def commit(self) -> None:
        """Rename the new contents over the file: readers see the old bytes or the new, never a mix."""
        try:
            if self.mode is not None:
                os.chmod(self.temporary, self.mode)
            os.replace(self.temporary, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.temporary.unlink(missing_ok=True)


def stage_all(writes: Sequence[tuple[Path, bytes, Optional[Path]]]) -> list[Staged]:
    """Each ``(path, data, like)`` written and fsynced beside its file as :func:`write_atomically` does, on a
    few threads: fsync waits on the disk, not the CPU, and the file system commits waits that overlap together,
    so a hundred files take the time of a few.  Nothing is in place yet: :func:`commit_all` puts them there.
    A failure removes every temporary file and raises the ``OSError`` with ``filename`` the file's own path:
    no file has changed."""
    if len(writes) < 2:
        return [_staged(*write) for write in writes]
    from concurrent.futures import ThreadPoolExecutor  # only where many files are written

    with ThreadPoolExecutor(min(STAGING_THREADS, len(writes))) as threads:
        futures = [threads.submit(_staged, *write) for write in writes]
    failed = [error for error in (future.exception() for future in futures) if error is not None]
    if failed:
        for future in futures:
            if future.exception() is None:
                future.result().discard()
        raise failed[0]
    return [future.result() for future in futures]


def _staged(path: Path, data: bytes, like: Optional[Path]) -> Staged:
    try:
        return _stage(path, data, like)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from None


def commit_all(staged: Sequence[Staged], after_each: Callable[[Staged], None] = lambda staged: None) -> None:
    """Rename each staged file into place, in order (``after_each`` once it is), then make the renames durable,
    each directory once.  Where a rename (or ``after_each``) fails, the files not yet renamed are discarded and the
    ``OSError`` names the file: those before it are in place, and so is it where only ``after_each`` failed."""
    for at, written in enumerate(staged):
        try:
            written.commit()
            after_each(written)
        except OSError as error:
            for left in staged[at:]:
                left.discard()
            raise OSError(error.errno, error.strerror, str(written.path)) from None
    for directory in dict.fromkeys(written.path.parent for written in staged):
        _fsync_directory(directory)


def link_all(files: Sequence[tuple[Path, Path, Optional[bytes]]], like: Optional[Path] = None) -> None:
    """Each ``(existing, kept, data)``: ``kept`` made a second name of ``existing`` (a hard link), for a file that
    is about to be renamed over or unlinked, never written in place (a model file ``apply`` replaces, the
    installer's bytecode it drops): no byte is written, so there is nothing to wait for but the directories.
    ``data``, where given, is what ``kept`` must hold (the text the plan judged): a file changed since is kept
    as ``data``.  Where a link cannot be made (another file system, one without links), a copy is written as
    :func:`stage_all` writes.  An error names the file it could not keep."""
    copies = []
    for existing, kept, data in files:
        try:
            os.link(existing, kept)
            if data is None or kept.read_bytes() == data:
                continue
            kept.unlink()
        except OSError:
            pass
        try:
            copies.append((kept, existing.read_bytes() if data is None else data, like))
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(kept)) from None
    commit_all(stage_all(copies))
    for directory in dict.fromkeys(kept.parent for _, kept, _ in files):
        _fsync_directory(directory)


def _stage(path: Path, data: bytes, like: Optional[Path], concurrent: bool = False, durable: bool = True) -> Staged:
    """``data`` in the temporary file of ``path``, fsynced (unless not ``durable``)."""
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
            if durable:
                os.fsync(stream.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return Staged(path, temporary, mode)


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
    """The cached bytecode of ``source`` (``__pycache__/<stem>.<tag>.pyc``).  Listed, not globbed: a glob
    compiles a pattern per file, and ``apply`` asks of a hundred."""
    cache = source.parent / "__pycache__"
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    prefix = f"{source.stem}."
    return sorted(cache / n for n in names if n.startswith(prefix) and n.endswith(".pyc") and len(n) > len(prefix) + 3)


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
