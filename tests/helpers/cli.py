"""The real command, run as users run it: a subprocess with real exit codes, stdout and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command in a subprocess: real exit codes, real stdout/stderr, no terminal."""
    return subprocess.run(
        [sys.executable, "-m", "vllm_eagle3_patch", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def run_on(package_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The command on the vLLM tree ``package_dir`` (``--vllm-dir``)."""
    return run_cli("--vllm-dir", str(package_dir), *args)


def status_of(package_dir: Path) -> dict:
    """``status --json`` of ``package_dir``, which must succeed."""
    completed = run_on(package_dir, "status", "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)
