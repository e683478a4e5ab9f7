"""What every verification shares: a named check and its outcome, and how a check script runs
in the target interpreter (the one that imports the vLLM under test)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..install.interpreter import run_script
from ..plan import Plan


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run_in_target(plan: Plan, python: str, script: Path, arguments: list[str], timeout: float) -> dict:
    """Run one of this tool's scripts in the target interpreter, the vLLM under test first on
    its path (whichever way it was found), and return the JSON object it printed last;
    ``{"failed": <last line of stderr>}`` when it printed none."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plan.install.root), env.get("PYTHONPATH")) if p)
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    return run_script(python, script, arguments, timeout, env=env, cwd=plan.install.root)
