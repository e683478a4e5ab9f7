"""Run many independent jobs on two processes: ``apply`` and ``diff`` write out some 120 patched model
files, and finding the families by rule parses some 230.

Parsing, transforming and writing out a file is pure Python, one file at a time; a forked child takes
part of the jobs, so two CPUs halve the wait.  The two take the jobs from one queue, the heaviest first (by
``weights``: a file's size), each the next one as soon as it is free: what a job costs is known only once it
has run (a file the release has laid out already costs less than its size says), so no split made ahead
balances as well.  The queue is a pipe filled before the fork with each job's index; a read of one index
from it is atomic, so no job runs twice.  The child inherits everything the parent has loaded (the release,
the codemods, the sources already read), and hands back only its jobs' results, pickled.  Where there is no
``fork`` (Windows), or few jobs, they run here, one after the other.
"""

from __future__ import annotations

import os
import pickle
from typing import Callable, Iterator, Optional, Sequence, TypeVar

from ..errors import ToolError
from .patch import State, Verdict

T = TypeVar("T")
FEW = 8
"""Below this many jobs a fork costs more than it saves."""
MANY = 4000
"""Above this many the queue might not fit in a pipe's buffer (16 KiB on some systems): they run here."""
_INDEX = 4
"""Bytes per job index in the queue."""


def judge_all(
    jobs: Sequence[Callable[[], Verdict]],
    weights: Optional[Sequence[float]] = None,
    meanwhile: Callable[[], object] = lambda: None,
) -> list[Verdict]:
    """``job()`` for every job, in order, each verdict with its patched text (a codemod bug raises in the
    process judging: the text is written out and compiled there); ``meanwhile`` as for :func:`on_two_processes`."""
    encoded = [lambda job=job: _encoded(job()) for job in jobs]  # typed here: mypy cannot type it as an argument
    answers = on_two_processes(encoded, weights, meanwhile)
    return [Verdict.written(State(state), reason, text) for state, reason, text in answers]


def on_two_processes(
    jobs: Sequence[Callable[[], T]],
    weights: Optional[Sequence[float]] = None,
    meanwhile: Callable[[], object] = lambda: None,
    few: int = FEW,
) -> list[T]:
    """``job()`` for every job, in order; a share of them in a forked child (results must pickle).

    ``meanwhile`` is work this process needs anyway and the child does not: it runs here first, while the
    child starts on the queue, which then leaves this process fewer jobs.  Below ``few`` jobs they run here."""
    if not few <= len(jobs) <= MANY or not hasattr(os, "fork"):
        meanwhile()
        return [job() for job in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -weights[i]) if weights else range(len(jobs))
    queue, filling = os.pipe()
    os.write(filling, b"".join(index.to_bytes(_INDEX, "little") for index in order))
    os.close(filling)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's coverage is its parent's results
        os.close(read_end)
        _run_child(jobs, queue, write_end)
    os.close(write_end)
    try:
        meanwhile()
        mine = {index: jobs[index]() for index in _taken(queue)}
    finally:
        os.close(queue)
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        _, status = os.waitpid(child, 0)
    results = {**mine, **_decoded(answer, status)}
    return [results[index] for index in range(len(jobs))]


def _taken(queue: int) -> Iterator[int]:
    """The index of the next job nobody has taken, until none is left."""
    while True:
        index = os.read(queue, _INDEX)
        if not index:
            return
        yield int.from_bytes(index, "little")


def _run_child(jobs: Sequence[Callable[[], object]], queue: int, write_end: int) -> None:
    """Take jobs from ``queue`` until it is empty, and send their results by index, or the error, down the
    pipe; never return."""
    code = 0
    try:
        answer: tuple = ("results", {index: jobs[index]() for index in _taken(queue)})
    except ToolError as error:
        answer, code = ("tool_error", str(error)), 1
    except BaseException as error:  # noqa: BLE001 - the parent raises it again
        answer, code = ("error", f"{type(error).__name__}: {error}"), 1
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(pickle.dumps(answer))
    os._exit(code)


def _encoded(verdict: Verdict) -> tuple[str, str, Optional[str]]:
    return verdict.state.value, verdict.reason, verdict.patched


def _decoded(answer: bytes, status: int) -> dict:
    try:
        kind, data = pickle.loads(answer)
    except Exception:  # noqa: BLE001 - a child that died mid-write
        kind, data = "error", f"the second process ended without an answer (status {status})"
    if kind == "tool_error":
        raise ToolError(data)
    if kind == "error":
        raise RuntimeError(f"running jobs in a second process failed: {data}")
    return data
