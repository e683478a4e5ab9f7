"""``verify --engine``: the whole EAGLE-3 path in the user's own vLLM, with tiny models.

The stand-in checks of ``verify`` prove the patched methods; only a real engine proves the
path users depend on: the speculative-config gate, the runner's ``supports_eagle3`` check
and ``set_aux_hidden_state_layers`` call, the real decoder layers, the proposer, the
drafter reading the aux states, and rejection sampling.  A wrong layer reaching the drafter
would not crash anything, only make decoding slower, so the check builds drafters that can
tell: one whose drafts are right only if the target's aux states arrive, and a blind copy.

Every engine run is a subprocess of the target interpreter (``in_target/engine_run.py``); this
module only orchestrates and judges, and imports neither torch nor vLLM.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from ..plan import Plan
from .checks import Check, run_in_target

ENGINE_RUN = Path(__file__).parent / "in_target" / "engine_run.py"
TIMEOUT_SECONDS = 900
LAYERS = 8
STATE_TOLERANCE = 1e-3
RUNS = {
    "without a drafter": None,
    "state-dependent drafter": "drafter-default",
    "blind drafter": "drafter-default-blind",
}


Step = Callable[[str], ContextManager[None]]
"""Shows the user which step is running (``verify --engine`` on a terminal); a no-op elsewhere."""


def engine_checks(
    plan: Plan, python: str, eager: bool = False, step: Optional[Step] = None
) -> tuple[tuple[Check, ...], dict[str, Any]]:
    """The checks, and the runs behind them (for ``--json``).  ``eager``: without torch.compile
    (and CUDA graphs); by default vLLM runs as it runs for users, compiled.  ``step``: shows each
    step to the user (None: nothing shown)."""
    step = step or (lambda name: nullcontext())
    with tempfile.TemporaryDirectory(prefix="vllm-eagle3-patch-engine-") as tmp:
        models = Path(tmp)
        layers = max(LAYERS, max(plan.options.aux_layers or (0,)) + 1)
        with step("building the tiny target and drafters"):
            built = _in_target(plan, python, ["build", str(models), "--layers", str(layers), "--ask-vllm"])
        if "built" not in built:
            failure = Check("tiny models built", False, built.get("error") or "the build failed")
            return (failure,), {"build": built}
        reference = json.loads((models / "reference.json").read_text())
        runs = {}
        for number, (name, drafter) in enumerate(RUNS.items(), start=1):
            with step(f"engine run {number}/{len(RUNS)}: {name}{'' if eager else ' (compiled)'}"):
                runs[name] = _run(plan, python, models, reference, drafter, eager)
    summary = {"layer_ids": built["sets"]["default"], "compiled": not eager, "runs": _summaries(runs)}
    return judge_runs(runs, reference), summary


def judge_runs(runs: dict[str, dict[str, Any]], reference: dict[str, Any]) -> tuple[Check, ...]:
    plain, drafted, blind = (runs[name] for name in RUNS)
    ids = tuple(reference["sets"]["default"]["layer_ids"])
    expected = [seq[len(p) :] for seq, p in zip(reference["sets"]["default"]["trajectories"], reference["prompts"])]
    return (
        _check(
            "vLLM decodes the tiny target as transformers does", plain, lambda: _same_tokens(plain["tokens"], expected)
        ),
        _check("EAGLE-3 decoding is lossless", drafted, lambda: _lossless(plain, drafted, blind)),
        _check(f"the drafter gets aux layers {ids} and its drafts accepted", drafted, lambda: _all_accepted(drafted)),
        _check("a blind drafter gets nothing accepted", blind, lambda: _none_accepted(blind)),
        _check(
            f"aux states equal transformers' hidden states at {ids}", drafted, lambda: _same_states(drafted, reference)
        ),
    )


def _check(name: str, run: dict[str, Any], verdict) -> Check:
    if not run.get("ok"):
        return Check(name, False, f"the engine failed: {_first_line(run.get('error'))}")
    try:
        return Check(name, True, verdict())
    except AssertionError as failure:
        return Check(name, False, str(failure))


def _same_tokens(got: list[list[int]], expected: list[list[int]]) -> str:
    assert got == expected, f"greedy tokens {got} differ from transformers' {expected}"
    return f"{sum(map(len, got))} greedy tokens identical"


def _lossless(plain: dict[str, Any], drafted: dict[str, Any], blind: dict[str, Any]) -> str:
    for run in (drafted, blind):
        assert run.get("ok"), f"the engine failed: {_first_line(run.get('error'))}"
        assert run["tokens"] == plain["tokens"], f"tokens with a drafter {run['tokens']} != without {plain['tokens']}"
    return "greedy tokens with either drafter identical to those without"


def _all_accepted(run: dict[str, Any]) -> str:
    drafted, accepted = run.get("draft_tokens", 0), run.get("accepted_tokens", 0)
    assert drafted > 0, "no drafts were proposed"
    assert accepted == drafted, f"{accepted}/{drafted} draft tokens accepted: the drafter is not getting its layers"
    return f"{accepted}/{drafted} draft tokens accepted ({run.get('counts_from')})"


def _none_accepted(run: dict[str, Any]) -> str:
    drafted, accepted = run.get("draft_tokens", 0), run.get("accepted_tokens", 0)
    assert drafted > 0, "no drafts were proposed"
    assert accepted == 0, f"{accepted}/{drafted} accepted: acceptance does not depend on the aux states"
    return f"0/{drafted} draft tokens accepted"


def _same_states(run: dict[str, Any], reference: dict[str, Any]) -> str:
    states = reference["sets"]["default"]["states"]
    expected: list[list[float]] = [
        sum(states[i][pos], []) for i, prompt in enumerate(reference["prompts"]) for pos in range(len(prompt))
    ]
    received = run.get("drafter_input") or []
    assert len(received) == len(expected), (
        f"the drafter's first call had {len(received)} positions, expected {len(expected)}"
    )
    worst = max(abs(a - b) for got, want in zip(received, expected) for a, b in zip(got, want))
    assert worst < STATE_TOLERANCE, f"differ by up to {worst:.2e}"
    return f"max difference {worst:.1e} over {len(received)} positions"


def _run(
    plan: Plan, python: str, models: Path, reference: dict[str, Any], drafter: Optional[str], eager: bool
) -> dict[str, Any]:
    prompts = reference["prompts"]
    case = {
        "target": str(models / "target"),
        "drafter": str(models / drafter) if drafter else None,
        "prompts": prompts,
        "max_tokens": len(reference["sets"]["default"]["trajectories"][0]) - len(prompts[0]),
        "eager": eager,
    }
    case_file = models / f"case-{drafter or 'none'}.json"
    case_file.write_text(json.dumps(case))
    return _in_target(plan, python, ["run", str(case_file)])


def _in_target(plan: Plan, python: str, arguments: list[str]) -> dict[str, Any]:
    outcome = run_in_target(plan, python, ENGINE_RUN, arguments, TIMEOUT_SECONDS)
    return {"ok": False, "error": outcome["failed"]} if "failed" in outcome else outcome


def _summaries(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    keep: tuple[str, ...] = ("ok", "error", "tokens", "drafts", "draft_tokens", "accepted_tokens", "counts_from")
    keep += ("cpu_shim", "vllm", "compilation")
    return {name: {k: run.get(k) for k in keep} for name, run in runs.items()}


def _first_line(text: Optional[str]) -> str:
    """The line that says what went wrong (pydantic puts it after a header line)."""
    lines = (text or "unknown error").strip().splitlines()
    for line in lines:
        if "Value error, " in line:
            return line.split("Value error, ", 1)[1][:400]
    return lines[0][:400]
