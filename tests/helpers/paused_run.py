"""A real run of the command that stops itself at one exact rename, for a test to ``kill -9`` it there.

Why: a kill timed by watching the tree from outside races the writer.  The temporary file the test
saw may already be renamed into place when the signal lands, or the run may be past the file the
test waited for, so "killed at this moment" would sometimes test another moment.  Instead the child
wraps ``os.replace`` (the rename by which ``install/fileio.py`` puts every file in place) and, at the
first rename into a given directory, announces itself by a marker file and waits there (before the
rename: the temporary file sits beside vLLM's; after it: one file is written, the next not yet), so
the test's SIGKILL lands at exactly that point.  The product has no hook for this: only the child's
``os.replace`` is wrapped, by this module, and only when a test runs it.

Run as ``python -m helpers.paused_run MARKER before|after DIRECTORY ARGS...`` (``tests/`` on the path).
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

MOMENTS = ("before", "after")
"""Where the child waits: just before the rename into the directory, or just after it."""
WAIT_SECONDS = 600
"""How long a paused child waits for its kill before it exits by itself (a failed test leaves no process)."""


def spawn_paused(marker: Path, moment: str, directory: Path, *args: str) -> subprocess.Popen:
    """The command ``args`` in a child that pauses at its first rename into ``directory`` (``moment``)."""
    assert moment in MOMENTS, moment
    tests = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.paused_run", str(marker), moment, str(directory), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path},
    )


def kill_at_pause(process: subprocess.Popen, marker: Path, timeout: float = 300.0) -> None:
    """SIGKILL ``process`` once it has paused (its ``marker`` exists); fail if it finished or never paused."""
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists():
            assert process.poll() is None, f"the run ended (exit {process.returncode}) before its pause"
            assert time.monotonic() < deadline, f"the run did not pause within {timeout} s"
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    marker.unlink()


def _pausing_replace(marker: Path, moment: str, directory: Path):  # type: ignore[no-untyped-def]
    """``os.replace`` that waits (forever, for the kill) at its first rename into ``directory``."""
    replace = os.replace

    def pause() -> None:
        marker.write_text("paused\n")
        time.sleep(WAIT_SECONDS)
        os._exit(75)

    def pausing(source, destination, *args, **kwargs):  # type: ignore[no-untyped-def]
        into = Path(destination).resolve().parent == directory
        if into and moment == "before":
            pause()
        replace(source, destination, *args, **kwargs)
        if into and moment == "after":
            pause()

    return pausing


def main() -> None:
    marker, moment, directory, *args = sys.argv[1:]
    os.replace = _pausing_replace(Path(marker), moment, Path(directory).resolve())
    sys.argv = ["vllm-eagle3-patch", *args]
    runpy.run_module("vllm_eagle3_patch", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
