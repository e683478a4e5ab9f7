"""One ``apply``/``revert`` at a time per vLLM package: an flock on ``.vllm-eagle3-patch/lock``."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from ..errors import ToolError


class StateDirectory(Protocol):
    """Where a run's lock lives (``manifest.StateDir``): the directory, made on demand."""

    path: Path

    def make(self) -> None: ...


LOCK_WAIT_SECONDS = 10.0


@contextmanager
def locked(state_dir: StateDirectory) -> Iterator[None]:
    """Hold the lock of ``state_dir``; a second run waits briefly, then refuses.

    ``revert`` deletes the state directory, lock file included, while holding the lock; a
    waiter that then gets the lock of a deleted file, or finds the directory gone between making
    it and opening the lock, starts over with the new one.
    """
    lock_path = state_dir.path / "lock"
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        state_dir.make()
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a finishing revert removed the directory just now
            continue
        with open(descriptor, "r+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ToolError(f"{lock_path}: another vllm-eagle3-patch is working on this vLLM") from None
                time.sleep(0.1)
                continue
            if lock_path.exists() and os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino:
                yield
                return


def held(state_path: Path) -> bool:
    """Whether a running ``apply``/``revert`` holds the lock now; asked read-only, so ``status``
    writes nothing and works for a user who may not write the package."""
    try:
        descriptor = os.open(state_path / "lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # closing drops a shared lock taken here
    return False
