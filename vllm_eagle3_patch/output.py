"""What reaches the user: text or one JSON object on stdout, errors on stderr, and the exit
status when the reader of stdout went away.

Every command ends here, so each one follows the same rules: under ``--json`` an error is one
JSON object too (``{"error", "exit_code"}``), and a reader that left before the output was all
read makes the command exit 141, as SIGPIPE does to ``cat`` or ``git``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import stat
import sys
from typing import Any, TextIO

from . import PROG

READER_WENT_AWAY = 128 + signal.SIGPIPE
"""The status a shell reports for a writer ended by SIGPIPE (141)."""


def emit_json(data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2))


def error(message: str, code: int, as_json: bool) -> int:
    """One line on stderr, as always; under ``--json`` also the object a script parses on stdout."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return error_object(message, code) if as_json else code


def error_object(message: str, code: int) -> int:
    """``{"error", "exit_code"}`` on stdout: what ``--json`` prints instead of the command's object.
    The error's status stands even where no one reads the object: stderr said it."""
    try:
        emit_json({"error": message, "exit_code": code})
        sys.stdout.flush()
    except BrokenPipeError:
        reader_went_away()
    return code


def finish(status: int) -> int:
    """Flush stdout and return ``status``, or 141 when the reader went away.

    Python's buffered stdout drops what a pipe did not take when its reader closes part-way
    (the write returns short, and no error is raised), so a failed flush alone does not tell:
    the pipe is asked whether anyone still reads it."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return reader_went_away()
    return reader_went_away() if reader_gone(sys.stdout) else status


def reader_gone(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe (or socket) whose reading end is closed."""
    try:
        descriptor = stream.fileno()
        mode = os.fstat(descriptor).st_mode
    except (AttributeError, ValueError, OSError):
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def reader_went_away() -> int:
    """``diff | head``: the reader closed the pipe.  Not an error: exit quietly, with the status
    git and the coreutils get from SIGPIPE.  Nothing is printed; stdout goes to /dev/null so the
    interpreter's last flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return READER_WENT_AWAY
