"""Judging files on two processes gives what judging them here gives, in order, errors included."""

from __future__ import annotations

import os
import time
from typing import Callable

import pytest

from vllm_eagle3_patch.codemod.patch import State, Verdict
from vllm_eagle3_patch.codemod.two_processes import FEW, judge_all, on_two_processes
from vllm_eagle3_patch.errors import ToolError

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


SLOW = 0.02
"""Seconds a test job takes: long enough that the child, forked while the parent starts, takes some."""


def job(index: int, seconds: float = SLOW):
    def judged() -> Verdict:
        time.sleep(seconds)
        return Verdict(State.UNSUPPORTED, f"file {index} judged by {os.getpid()}")

    return judged


def only_in_the_child(failure: Callable[[], Verdict], index: int) -> Callable[[], Verdict]:
    """A job that fails where the child runs it (and passes here): the child takes some jobs of every test."""
    parent = os.getpid()
    passing = job(index)
    return lambda: passing() if os.getpid() == parent else failure()


@pytest.mark.parametrize("count", [FEW - 1, FEW, FEW + 1, 3 * FEW])
def test_every_verdict_comes_back_in_order(count):
    verdicts = judge_all([job(i) for i in range(count)])
    assert [v.reason.split(" judged")[0] for v in verdicts] == [f"file {i}" for i in range(count)]
    assert all(v.state is State.UNSUPPORTED and v.patched is None for v in verdicts)
    judges = {v.reason.rsplit(" ", 1)[1] for v in verdicts}
    assert str(os.getpid()) in judges
    assert len(judges) == (1 if count < FEW else 2)  # from FEW files on, a child takes some


def test_the_two_take_jobs_as_they_are_free_heaviest_first():
    """One job costs twice all the others together: whoever takes it (the heaviest, first) takes no other, the
    other process takes them all, and every job runs once.  Split by count or taken in order, the heavy job
    would share a process with light ones."""
    weights = [1.0] * (2 * FEW) + [4 * FEW]
    seconds = [SLOW] * (2 * FEW) + [4 * FEW * SLOW]
    verdicts = judge_all([job(i, s) for i, s in enumerate(seconds)], weights)
    heavy = verdicts[-1].reason.rsplit(" ", 1)[1]
    assert [v.reason.split(" judged")[0] for v in verdicts] == [f"file {i}" for i in range(len(seconds))]
    assert all(v.reason.rsplit(" ", 1)[1] != heavy for v in verdicts[:-1])


def test_a_tool_error_in_the_child_is_the_same_error_here():
    def refuse() -> Verdict:
        raise ToolError("model_executor/models/x.py: expected a decoder loop")

    with pytest.raises(ToolError, match="expected a decoder loop"):
        judge_all([only_in_the_child(refuse, i) for i in range(FEW)])


def test_a_bug_in_the_child_is_raised_here():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        judge_all([only_in_the_child(lambda: 1 / 0, i) for i in range(FEW)])  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("count", [FEW - 1, 3 * FEW])
def test_meanwhile_runs_once_here_while_the_child_takes_the_jobs(count):
    """The caller's own work (discovery's: the release's search, LibCST's import) runs in this process, once,
    before it takes a job; the child, free meanwhile, takes more of them."""
    ran_in: list[int] = []

    def meanwhile() -> None:
        ran_in.append(os.getpid())
        time.sleep(FEW * SLOW)

    results = on_two_processes([lambda i=i: (i, os.getpid()) for i in range(count)], meanwhile=meanwhile)
    assert ran_in == [os.getpid()]
    assert [i for i, _ in results] == list(range(count))
    if count >= FEW:  # while this process waited, the child took at least half
        assert sum(pid != os.getpid() for _, pid in results) >= count // 2


def test_a_failure_meanwhile_is_raised_here_after_the_child_is_done():
    def fail() -> None:
        raise ToolError("meanwhile failed")

    with pytest.raises(ToolError, match="meanwhile failed"):
        on_two_processes([job(i) for i in range(3 * FEW)], meanwhile=fail)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left behind
