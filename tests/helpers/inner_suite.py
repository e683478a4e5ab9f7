"""Running the inner suite (``tests/inside_vllm``) in another interpreter, against a vLLM tree.

That interpreter may not import this tool, so what the inner tests need of it travels as data: the families
the tool patches on the tree (the registry's, then those it finds by rule) and the model types its gate
admits, as JSON in ``VLLM_EAGLE3_PATCH_FAMILIES`` (read by ``tests/inside_vllm/tool_families.py``).  Run as a
script, ``python tests/helpers/inner_suite.py <vllm dir>`` prints that JSON, for running the inner suite by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.target import State
from vllm_eagle3_patch.eagle3.release import module_name
from vllm_eagle3_patch.install.locate import from_package_dir
from vllm_eagle3_patch.plan import Plan, make_plan
from vllm_eagle3_patch.registry import FAMILIES, gated_model_types

INSIDE_VLLM = Path(__file__).resolve().parents[1] / "inside_vllm"
FAMILIES_VARIABLE = "VLLM_EAGLE3_PATCH_FAMILIES"


def families_of(plan: Plan) -> tuple[Family, ...]:
    """The families the tool patches on the plan's tree: the registry's, then those found by rule."""
    return (*FAMILIES, *plan.discovery.families)


def families_data(package_dir: Path) -> str:
    """``{"families": [{module, model, causal_lm, model_types, found_by_rule}], "gated_model_types": [...],
    "wrappers": [{module, cls, attribute, language_model, bare, chosen_by_checkpoint}]}`` (the multimodal classes
    found by rule whose files the tool patches)."""
    plan = make_plan(from_package_dir(package_dir), states_only=True)
    families = [
        {
            "module": module_name(family.path),
            "model": family.model,
            "causal_lm": family.causal_lm,
            "model_types": list(family.model_types),
            "found_by_rule": family not in FAMILIES,
        }
        for family in families_of(plan)
    ]
    eagle3_files = {f.path for f in plan.files if f.state in (State.PATCHED, State.UNPATCHED)}
    wrappers = {
        (found.wrapper.path, found.wrapper.cls): {
            "module": module_name(found.wrapper.path),
            "cls": found.wrapper.cls,
            "attribute": found.wrapper.language_model.removeprefix("self."),
            "language_model": found.language_model,
            "bare": found.bare,
            "chosen_by_checkpoint": found.chosen_by_checkpoint,
        }
        for found in plan.discovery.wrappers.values()
        if found.wrapper.path in eagle3_files
    }
    return json.dumps(
        {"families": families, "gated_model_types": list(gated_model_types()), "wrappers": list(wrappers.values())}
    )


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
        FAMILIES_VARIABLE: families_data(package_dir),
    }
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(INSIDE_VLLM / suite), *pytest_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=package_dir.parent,
    )


if __name__ == "__main__":
    print(families_data(Path(sys.argv[1])))
