"""Run many independent jobs on two processes: ``apply`` and ``diff`` write out some 70 patched model
files, and finding the families by rule parses some 120.

Parsing, transforming and writing out a file is pure Python, one file at a time; a forked child takes
part of the jobs, so two CPUs halve the wait.  The shares are balanced by each job's weight (a file's
size): the heaviest first, each to the side with less so far.  The child inherits everything the parent
has loaded (the release, the codemods, the sources already read), and hands back only the jobs'
results, pickled.  Where there is no ``fork`` (Windows), or few jobs, they run here, one after the other.
"""

from __future__ import annotations

import os
import pickle
from typing import Callable, Optional, Sequence, TypeVar

from ..errors import ToolError
from .patch import State, Verdict

T = TypeVar("T")
FEW = 8
"""Below this many jobs a fork costs more than it saves."""


def judge_all(jobs: Sequence[Callable[[], Verdict]], weights: Optional[Sequence[float]] = None) -> list[Verdict]:
    """``job()`` for every job, in order, each verdict with its patched text (a codemod bug raises in the
    process judging: the text is written out and compiled there)."""
    answers = on_two_processes([lambda job=job: _encoded(job()) for job in jobs], weights)
    return [Verdict.written(State(state), reason, text) for state, reason, text in answers]


def on_two_processes(jobs: Sequence[Callable[[], T]], weights: Optional[Sequence[float]] = None) -> list[T]:
    """``job()`` for every job, in order; a share of them in a forked child (results must pickle)."""
    if len(jobs) < FEW or not hasattr(os, "fork"):
        return [job() for job in jobs]
    theirs_at = set(_child_share(weights or [1.0] * len(jobs)))
    mine_at = [i for i in range(len(jobs)) if i not in theirs_at]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's coverage is its parent's results
        os.close(read_end)
        _run_child([jobs[i] for i in sorted(theirs_at)], write_end)
    os.close(write_end)
    try:
        mine = [jobs[i]() for i in mine_at]
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        _, status = os.waitpid(child, 0)
    results = dict(zip(mine_at, mine))
    results.update(zip(sorted(theirs_at), _decoded(answer, status)))
    return [results[i] for i in range(len(jobs))]


def _child_share(weights: Sequence[float]) -> list[int]:
    """The jobs the child takes: greedily, the heaviest first, each to the lighter side (the parent's on a tie)."""
    parent = child = 0.0
    taken = []
    for index in sorted(range(len(weights)), key=lambda i: -weights[i]):
        if child < parent:
            child += weights[index]
            taken.append(index)
        else:
            parent += weights[index]
    return taken


def _run_child(jobs: Sequence[Callable[[], object]], write_end: int) -> None:
    """Run ``jobs`` and send their results, or the error, down the pipe; never return."""
    code = 0
    try:
        answer: tuple = ("results", [job() for job in jobs])
    except ToolError as error:
        answer, code = ("tool_error", str(error)), 1
    except BaseException as error:  # noqa: BLE001 - the parent raises it again
        answer, code = ("error", f"{type(error).__name__}: {error}"), 1
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(pickle.dumps(answer))
    os._exit(code)


def _encoded(verdict: Verdict) -> tuple[str, str, Optional[str]]:
    return verdict.state.value, verdict.reason, verdict.patched


def _decoded(answer: bytes, status: int) -> list:
    try:
        kind, data = pickle.loads(answer)
    except Exception:  # noqa: BLE001 - a child that died mid-write
        kind, data = "error", f"the second process ended without an answer (status {status})"
    if kind == "tool_error":
        raise ToolError(data)
    if kind == "error":
        raise RuntimeError(f"running jobs in a second process failed: {data}")
    return data
