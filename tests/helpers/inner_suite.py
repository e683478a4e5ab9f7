"""Running the inner suite (``tests/inside_vllm``) in another interpreter, against a vLLM tree.

That interpreter may not import this tool, so what the inner tests need of it travels as data: the families
the tool patches on the tree (the catalog's, then those it finds by rule), the model types its gate
admits and the entries the release's own gate matched before any patch (read from the unpatched wheel in the
cache), as JSON in ``VLLM_EAGLE3_PATCH_FAMILIES`` (read by ``tests/inside_vllm/tool_families.py``).
``PYTHONPATH=tests python -m helpers.inner_suite <vllm dir>`` prints that JSON, for running the inner suite by hand.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from helpers.wheel_corpus import release_tree
from vllm_eagle3_patch.catalog import FAMILIES, gated_model_types
from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.patch import State
from vllm_eagle3_patch.eagle3.class_chain import ChainReader
from vllm_eagle3_patch.eagle3.modules import import_name, registry_module
from vllm_eagle3_patch.eagle3.release import GATE_SIGNS, Release, admitted_entries
from vllm_eagle3_patch.install.locate import from_package_dir
from vllm_eagle3_patch.multimodal import held_answers_model, held_class
from vllm_eagle3_patch.patches.shared_embedding import SHARED_EMBEDDINGS, TOKEN_EMBEDDING
from vllm_eagle3_patch.plan import Plan, make_plan

INSIDE_VLLM = Path(__file__).resolve().parents[1] / "inside_vllm"
FAMILIES_VARIABLE = "VLLM_EAGLE3_PATCH_FAMILIES"


def families_of(plan: Plan) -> tuple[Family, ...]:
    """The families the tool patches on the plan's tree: the catalog's, then those found by rule."""
    return (*FAMILIES, *plan.discovery.families)


def accepted_before(version: str) -> tuple[str, ...]:
    """The entries the gate of the wheel of ``version`` (unpatched, from the cache) matches model types against:
    what the patched gate must still accept (none: the release has no whitelist)."""
    release = Release(release_tree(version) / "vllm")
    source = (release.read(release.gate_file) if release.gate_file else None) or ""
    return admitted_entries(source) if any(sign in source for sign in GATE_SIGNS) else ()


def families_data(package_dir: Path) -> str:
    """``{"families": [{module, model, causal_lm, model_types, found_by_rule}], "gated_model_types": [...],
    "accepted_before": [...], "wrappers": [{module, cls, attribute, language_model, bare, chosen_by_checkpoint}]}``
    (the multimodal classes found by rule whose files the tool patches)."""
    install = from_package_dir(package_dir)
    plan = make_plan(install, states_only=True)
    families = [
        {
            "module": import_name(family.path),
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
            "module": import_name(found.wrapper.path),
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
        {
            "families": families,
            "gated_model_types": list(gated_model_types()),
            "accepted_before": list(accepted_before(install.version)),
            "wrappers": list(wrappers.values()),
            "refused_wrappers": refused_by_the_proposer(plan),
            "answering_wrappers": answering_the_proposer(plan, eagle3_files),
        }
    )


def refused_by_the_proposer(plan: Plan) -> list[dict]:
    """``[{module, cls, attribute, language_model, language_model_module}]``: the multimodal classes refused because
    the proposer could not take the embedding from their language model (the class their ``forward`` runs)."""
    chains = ChainReader(plan.release.read)
    refused = []
    for architecture, (module, cls) in plan.release.multimodal_models.items():
        if "get_language_model().model." not in plan.discovery.unrecognised.get(architecture, ""):
            continue
        chain = chains.registered(module, cls)
        runs = next(c for c in chain.classes if "forward" in c.methods)
        held = held_class(chains, chain, runs.returns_from)
        refused.append(
            {
                "module": f"vllm.{registry_module(module)}",
                "cls": cls,
                "attribute": runs.returns_from,
                "language_model": held.classes[0].name,
                "language_model_module": f"vllm.{held.classes[0].module}",
            }
        )
    return refused


def answering_the_proposer(plan: Plan, eagle3_files: set[str]) -> list[dict]:
    """``[{module, cls, attribute, language_model, language_model_module, embedding}]``: the multimodal classes served
    whose language model (the class their ``forward`` runs) gains a read-only ``model`` answering itself, where the
    proposer takes the embedding; ``embedding``: the attribute that language model builds its embedding in."""
    chains = ChainReader(plan.release.read)
    discovery = plan.discovery
    answering = []
    for architecture, (module, cls) in plan.release.multimodal_models.items():
        found, family = discovery.wrappers.get(architecture), discovery.architectures.get(architecture)
        path = found.wrapper.path if found else family.path if family else None
        chain = chains.registered(module, cls)
        runs = next((c for c in chain.classes if "forward" in c.methods), None) if chain else None
        if path not in eagle3_files or runs is None or runs.returns_from is None:
            continue
        answers = found.answers_model if found else held_answers_model(plan.release, chains, chain, runs.returns_from)
        if not answers:  # found: a family's bare model answers in the family's file (Kimi-K2.5's DeepseekV2Model)
            continue
        held = held_class(chains, chain, runs.returns_from)
        built = [
            a for c in held.classes for a, callee in c.holds if a in SHARED_EMBEDDINGS or callee == TOKEN_EMBEDDING
        ]
        answering.append(
            {
                "module": f"vllm.{registry_module(module)}",
                "cls": cls,
                "attribute": runs.returns_from,
                "language_model": held.classes[0].name,
                "language_model_module": f"vllm.{held.classes[0].module}",
                "embedding": built[0],
            }
        )
    return answering


def patched_decoders(package_dir: Path) -> list[dict]:
    """The decoder classes of the families whose files ``apply`` patched, one entry per class."""
    plan = make_plan(from_package_dir(package_dir), states_only=True)
    patched = {f.path for f in plan.files if f.state is State.PATCHED}
    decoders: dict[tuple[str, str], dict] = {}
    for family in families_of(plan):
        if family.path in patched:
            entry = decoders.setdefault(
                (family.path, family.model),
                {
                    "module": import_name(family.path),
                    "model": family.model,
                    "architectures": [],
                    "decoder": family.decoder,
                },
            )
            entry["architectures"].append(family.causal_lm)
    return list(decoders.values())


def case_id(decoder: dict) -> str:
    """The inner suites' id of a decoder's case: its module and class (platform-split packages hold classes of one
    name in each variant's module)."""
    return f"{decoder['module']}:{decoder['model']}"


def outcomes(
    python: Path, package_dir: Path, decoders_file: Path, suite: str, env: dict | None = None
) -> tuple[str, dict[str, str]]:
    """The inner module ``suite`` over the decoders listed in ``decoders_file``, and each case's outcome (passed,
    failed, skipped) by its id (what the brackets of its test name hold; a failure in any of its tests wins)."""
    report = decoders_file.with_suffix(".xml")
    env = {"VLLM_EAGLE3_PATCH_DECODERS": str(decoders_file), **(env or {})}
    inner = run_inside(python, package_dir, f"--junitxml={report}", suite=suite, env=env)
    found: dict[str, str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = re.search(r"\[(.+)\]$", case.get("name", "")).group(1)  # type: ignore[union-attr]
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
        found[name] = "failed" if found.get(name) == "failed" else outcome
    return inner.stdout[-8000:] + inner.stderr[-2000:], found


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
