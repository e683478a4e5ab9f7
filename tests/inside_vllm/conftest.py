"""Configuration of the inner suite: run with a real vLLM release first on ``PYTHONPATH``.

    PYTHONPATH=<patched release tree> <venv>/bin/python -m pytest tests/inside_vllm -q

The suite asserts the *patched* behaviour; on an unpatched tree it is expected to fail.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# vLLM logs Triton/_C warnings on import without a GPU; keep the test output readable.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

HERE = Path(__file__).resolve().parent
collect_ignore = [] if "VLLM_EAGLE3_PATCH_DECODERS" in os.environ else ["test_every_target.py", "test_first_layer.py"]
"""Those modules check the decoders the outer tests name (tests/test_every_target.py, tests/test_methods.py), and
only then run."""
if "VLLM_EAGLE3_PATCH_V2_RUNNER" not in os.environ:
    collect_ignore.append("test_model_runner_v2.py")  # run by tests/test_model_runner_v2.py, which names V2's helper
IN_TARGET = HERE.parents[1] / "vllm_eagle3_patch" / "verification" / "in_target"
"""The scripts ``verify`` runs in the target interpreter: the inner suite runs the same checks (``in_place``)."""
for path in (IN_TARGET, HERE):  # ``import harness`` under any --import-mode
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which vLLM tree is under test, so a log shows what was really imported."""
    import harness
    import vllm

    return [f"vllm {harness.vllm_version()} from {Path(vllm.__file__).parent}"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to run against anything but a real vLLM release tree.

    The tests must exercise the release's own code, so ``vllm`` has to come from a
    directory that also holds its ``vllm-<version>.dist-info``.
    """
    import vllm

    tree = Path(vllm.__file__).resolve().parent.parent
    if not any(tree.glob("vllm-*.dist-info")):
        raise pytest.UsageError(
            f"vllm was imported from {tree}, which holds no vllm-*.dist-info: put an "
            "extracted (patched) vLLM release first on PYTHONPATH"
        )
