"""Which releases a parametrized test runs: CI's few, or more with ``VLLM_EAGLE3_PATCH_RELEASES``.

CI runs the releases that prove something no other case proves (docs/testing.md); ``VLLM_EAGLE3_PATCH_RELEASES=all``
(or a comma-separated list) adds the others, as the whole matrix does.
"""

from __future__ import annotations

import os

import pytest

VARIABLE = "VLLM_EAGLE3_PATCH_RELEASES"


def release_param(version: str, in_ci: bool):
    """``version`` as a test parameter, skipped (with the way to run it) unless CI runs it or it is chosen."""
    chosen = os.environ.get(VARIABLE, "")
    wanted = in_ci or chosen == "all" or version in chosen.split(",")
    marks = () if wanted else pytest.mark.skip(reason=f"not selected; {VARIABLE}=all runs it")
    return pytest.param(version, id=version, marks=marks)


def whole_matrix_only():
    """A mark that runs a test only in the whole matrix (``VLLM_EAGLE3_PATCH_RELEASES=all``), with the way to run it."""
    chosen = os.environ.get(VARIABLE, "")
    return pytest.mark.skipif(chosen != "all", reason=f"the whole matrix's; {VARIABLE}=all runs it")
