"""Running the inner suite (``tests/inside_vllm``) in another interpreter, against a vLLM tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

INSIDE_VLLM = Path(__file__).resolve().parents[1] / "inside_vllm"


def run_inside(
    python: Path, package_dir: Path, *pytest_args: str, suite: str = "", env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the inner suite (tests/inside_vllm, or its file ``suite``) against the vLLM tree holding ``package_dir``."""
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": str(package_dir.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(INSIDE_VLLM / suite), *pytest_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=package_dir.parent,
    )
