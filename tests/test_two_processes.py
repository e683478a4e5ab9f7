"""Judging files on two processes gives what judging them here gives, in order, errors included."""

from __future__ import annotations

import os

import pytest

from vllm_eagle3_patch.codemod.patch import State, Verdict
from vllm_eagle3_patch.codemod.two_processes import FEW, judge_all
from vllm_eagle3_patch.errors import ToolError

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


def job(index: int):
    return lambda: Verdict(State.UNSUPPORTED, f"file {index} judged by {os.getpid()}")


@pytest.mark.parametrize("count", [FEW - 1, FEW, FEW + 1, 3 * FEW])
def test_every_verdict_comes_back_in_order(count):
    verdicts = judge_all([job(i) for i in range(count)])
    assert [v.reason.split(" judged")[0] for v in verdicts] == [f"file {i}" for i in range(count)]
    assert all(v.state is State.UNSUPPORTED and v.patched is None for v in verdicts)
    judges = {v.reason.rsplit(" ", 1)[1] for v in verdicts}
    assert str(os.getpid()) in judges
    assert len(judges) == (1 if count < FEW else 2)  # from FEW files on, the odd ones in a child


def test_a_tool_error_in_the_child_is_the_same_error_here():
    def refuse():
        raise ToolError("model_executor/models/x.py: expected a decoder loop")

    jobs = [job(i) for i in range(FEW)]
    jobs[1] = refuse  # an odd one: the child's
    with pytest.raises(ToolError, match="expected a decoder loop"):
        judge_all(jobs)


def test_a_bug_in_the_child_is_raised_here():
    jobs = [job(i) for i in range(FEW)]
    jobs[3] = lambda: 1 / 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        judge_all(jobs)
