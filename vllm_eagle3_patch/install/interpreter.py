"""Run one of this tool's scripts in another interpreter and read the JSON object it printed last.

The one way this tool asks another Python anything (where its vLLM is, whether the patched
code runs, an engine run): the scripts need only the standard library (and torch and vLLM,
where that is the point), print logs wherever they like and their answer as the last line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Optional

from ..errors import ToolError


def run_script(
    python: str,
    script: Path,
    arguments: list[str],
    timeout: float,
    env: Optional[dict[str, str]] = None,
    cwd: Optional[Path] = None,
) -> dict:
    """The last line of ``script``'s stdout, parsed; ``{"failed": <last line of stderr>}`` when
    it printed no JSON object there.  An interpreter that cannot be started is a :class:`ToolError`."""
    try:
        completed = subprocess.run(
            [python, str(script), *arguments], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolError(f"{python}: cannot run {script.name} ({error})") from None
    lines = completed.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        answer = None
    if not isinstance(answer, dict):
        return {"failed": _why_no_answer(completed.stderr, lines)}
    return answer


def _why_no_answer(stderr: str, stdout_lines: list[str]) -> str:
    """The last line of stderr (a traceback's error), or what stdout held instead of JSON."""
    errors = stderr.strip().splitlines()
    if errors:
        return errors[-1]
    return f"printed {stdout_lines[-1][:200]!r}, not a JSON object" if stdout_lines else "no output"
