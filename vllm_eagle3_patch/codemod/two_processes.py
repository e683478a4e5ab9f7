"""Judge many files on two processes: ``apply`` and ``diff`` write out some 70 patched model files.

Parsing, transforming and writing out a file with LibCST is pure Python, one file at a time; a forked
child takes every other file, so two CPUs halve the wait.  The child inherits everything the parent
has loaded (the release, the codemods), and hands back only what a plan keeps of a verdict: its
state, its reason and its patched text.  Where there is no ``fork`` (Windows), or few files, the
files are judged here, one after the other.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Sequence

from ..errors import ToolError
from .target import State, Verdict

FEW = 8
"""Below this many files a fork costs more than it saves."""


def judge_all(jobs: Sequence[Callable[[], Verdict]]) -> list[Verdict]:
    """``job()`` for every job, in order, the odd ones in a forked child; each with its patched text."""
    if len(jobs) < FEW or not hasattr(os, "fork"):
        return [_with_text(job()) for job in jobs]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's coverage is its parent's results
        os.close(read_end)
        _run_child(jobs[1::2], write_end)
    os.close(write_end)
    try:
        mine = [_with_text(job()) for job in jobs[0::2]]
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        _, status = os.waitpid(child, 0)
    theirs = _decoded(answer, status)
    merged = [verdict for pair in zip(mine, theirs) for verdict in pair]
    return merged + mine[len(theirs) :]


def _with_text(verdict: Verdict) -> Verdict:
    """The verdict with its patched text written out (a codemod bug raises here, in the process judging)."""
    verdict.patched  # noqa: B018 - computes and keeps the cached text
    return verdict


def _run_child(jobs: Sequence[Callable[[], Verdict]], write_end: int) -> None:
    """Judge ``jobs`` and send the answers, or the error, down the pipe; never return."""
    code = 0
    try:
        answers: object = [_encoded(_with_text(job())) for job in jobs]
    except ToolError as error:
        answers, code = {"tool_error": str(error)}, 1
    except BaseException as error:  # noqa: BLE001 - the parent raises it again
        answers, code = {"error": f"{type(error).__name__}: {error}"}, 1
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(json.dumps(answers).encode("utf-8"))
    os._exit(code)


def _encoded(verdict: Verdict) -> list:
    return [verdict.state.value, verdict.reason, verdict.patched]


def _decoded(answer: bytes, status: int) -> list[Verdict]:
    try:
        data = json.loads(answer)
    except ValueError:
        data = {"error": f"the judging process ended without an answer (status {status})"}
    if isinstance(data, dict) and "tool_error" in data:
        raise ToolError(data["tool_error"])
    if isinstance(data, dict):
        raise RuntimeError(f"judging the files in a second process failed: {data['error']}")
    return [Verdict.written(State(state), reason, text) for state, reason, text in data]
