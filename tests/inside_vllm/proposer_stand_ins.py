"""Stand-ins around the release's real ``EagleProposer.load_model`` (0.15.0 and later): targets made with
``object.__new__`` from transformers' and the release's configs, and the drafter load with only the GPU-bound names
replaced.  ``test_eagle_proposer.py`` and ``test_proposer_embedding.py`` both run it; importing this module skips
a test module on a release before 0.15.0, as the steps these stand-ins follow are that release's."""

from __future__ import annotations

import importlib
import types
from typing import Any, Optional

import harness
import pytest
import torch
from packaging.version import Version
from torch import nn

VERSION = harness.vllm_version()
BASE_PROPOSER_FIRST = Version("0.15.0")
if VERSION < BASE_PROPOSER_FIRST:
    pytest.skip(
        f"vLLM {VERSION}'s EagleProposer.load_model predates SpecDecodeBaseProposer (0.15.0), whose steps "
        "these stand-ins follow; the codemod's own tests run the patched token selection on every shape",
        allow_module_level=True,
    )

from transformers import PixtralVisionConfig, PretrainedConfig  # noqa: E402
from vllm.model_executor.models.interfaces import SupportsMultiModal  # noqa: E402

EAGLE = "vllm.v1.spec_decode.eagle"
KIMI_K25 = "vllm.model_executor.models.kimi_k25"

# Distinct ids, so an assertion tells which config field the proposer read.
MEDIA_PLACEHOLDER_TOKEN_ID = 163605  # Kimi-K2.5's real value
IMAGE_TOKEN_INDEX = 32000  # the generic field (LLaVA and most others)
IMAGE_TOKEN_ID = 151655  # the Qwen2-VL family's field
VISION_IMAGE_TOKEN_ID = 10  # Pixtral's, on its vision config


# --------------------------------------------------------------------------- stand-ins


class StandInLanguageModel(nn.Module):
    """A target's language model: what the embedding and LM-head sharing read.

    ``embed_input_ids`` makes it the child the real ``SupportsMultiModal.get_language_model``
    (0.16.0+, used by Kimi-K2.5 there) finds.
    """

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(8, 4)
        self.lm_head = nn.Linear(4, 8, bias=False)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)


class StandInDrafter(nn.Module):
    """An EAGLE-3 drafter as ``get_model`` would return it, without its own embedding or
    LM head (so ``load_model`` shares the target's).  Its ``config`` starts without
    ``image_token_index``: a test can tell whether ``load_model`` set it."""

    has_own_embed_tokens = False
    has_own_lm_head = False

    def __init__(self) -> None:
        super().__init__()
        self.config = types.SimpleNamespace()
        self.model = nn.Module()
        self.model.embed_tokens = None  # no weights of its own: newer releases look before they share


class LlavaForConditionalGeneration(nn.Module, SupportsMultiModal):
    """A multimodal target taking the generic branch (named as vLLM's LLaVA, whose real
    module needs ``mistral_common``, absent from the CPU venv)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.language_model = StandInLanguageModel()

    def get_language_model(self) -> nn.Module:
        return self.language_model


class Qwen2VLForConditionalGeneration(LlavaForConditionalGeneration):
    """Qwen2-VL: in no release's named list, its config has ``image_token_id`` only."""


class Qwen2AudioForConditionalGeneration(LlavaForConditionalGeneration):
    """Qwen2-Audio: multimodal without images, its config has ``audio_token_index`` only."""


class KimiVLForConditionalGeneration(LlavaForConditionalGeneration):
    """Kimi-VL: in no release's named list, its config calls the token ``media_placeholder_token_id``."""


class PictureVLForConditionalGeneration(LlavaForConditionalGeneration):
    """A Pixtral-like target under a name no release lists: its token is on ``vision_config``."""


class Qwen2_5_VLForConditionalGeneration(LlavaForConditionalGeneration):
    """A multimodal target the proposer reads ``image_token_id`` from (the real module
    needs ``torchvision``)."""


class PixtralForConditionalGeneration(LlavaForConditionalGeneration):
    """The named target the proposer reads ``vision_config.image_token_id`` from."""


def other_target_config() -> types.SimpleNamespace:
    """Every field the proposer could read, each with its own id: a named target, or one with
    ``image_token_index``, must get the field it got before."""
    return types.SimpleNamespace(
        image_token_index=IMAGE_TOKEN_INDEX,
        image_token_id=IMAGE_TOKEN_ID,
        vision_config=types.SimpleNamespace(image_token_id=VISION_IMAGE_TOKEN_ID),
        media_placeholder_token_id=MEDIA_PLACEHOLDER_TOKEN_ID,
    )


def pixtral_like_config() -> PretrainedConfig:
    """A config whose only image token is its vision config's, as vLLM's Pixtral has it."""
    return PretrainedConfig(vision_config=PixtralVisionConfig(image_token_id=VISION_IMAGE_TOKEN_ID))


def kimi_k25_config(**fields: Any) -> PretrainedConfig:
    """The config the release's Kimi-K2.5 module reads: vLLM's own ``KimiK25Config``, or transformers'
    ``Kimi_K25Config`` where the module takes that one."""
    kimi = importlib.import_module(KIMI_K25)
    return (getattr(kimi, "KimiK25Config", None) or kimi.Kimi_K25Config)(**fields)


def kimi_k25_target() -> nn.Module:
    """The release's ``KimiK25ForConditionalGeneration`` with the release's Kimi-K2.5 config.

    The real ``__init__`` builds a vision tower and a DeepSeek-V3 model, so the instance is
    made with ``object.__new__``; ``load_model`` only reads ``config`` and
    ``get_language_model()`` (which returns ``self.language_model``).
    """
    kimi = importlib.import_module(KIMI_K25)
    target = object.__new__(kimi.KimiK25ForConditionalGeneration)
    nn.Module.__init__(target)
    target.config = kimi_k25_config(media_placeholder_token_id=MEDIA_PLACEHOLDER_TOKEN_ID)
    target.language_model = StandInLanguageModel()
    return target


def load_drafter(target: nn.Module, monkeypatch: pytest.MonkeyPatch) -> StandInDrafter:
    """Run the real ``EagleProposer.load_model(target)``; return the drafter it loaded.

    The proposer gets only the attributes ``load_model`` reads before and after the token
    branch: the draft model config (handed to ``get_model``), ``supports_mm_inputs=False``
    (skips probing the drafter for multimodal inputs), ``parallel_drafting=False``
    (0.16.0+) and ``use_local_argmax_reduction=False`` (0.17.0+).  No attention or indexer
    layers are found, and the pipeline has one rank.  The names are replaced in the module
    that defines ``load_model`` (``eagle.py``, or the proposers' base module once it has its own).
    """
    eagle = importlib.import_module(EAGLE)
    proposer_module = importlib.import_module(eagle.EagleProposer.load_model.__module__)
    drafter = StandInDrafter()
    draft_model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace())  # read after the token (0.33.0)
    speculative_config = types.SimpleNamespace(draft_model_config=draft_model_config, draft_load_config=object())

    def get_model(*, vllm_config: Any, model_config: Any, **kwargs: Any) -> nn.Module:
        assert model_config is speculative_config.draft_model_config, "not the drafter's config"
        return drafter

    monkeypatch.setattr(proposer_module, "get_layers_from_vllm_config", lambda *args, **kwargs: {})
    monkeypatch.setattr(proposer_module, "get_model", get_model)
    monkeypatch.setattr(proposer_module, "get_pp_group", lambda: types.SimpleNamespace(world_size=1))
    if hasattr(proposer_module, "get_draft_load_config"):
        monkeypatch.setattr(
            proposer_module, "get_draft_load_config", lambda config: speculative_config.draft_load_config
        )

    proposer = object.__new__(eagle.EagleProposer)
    proposer.vllm_config = types.SimpleNamespace(speculative_config=speculative_config)
    proposer.speculative_config = speculative_config
    proposer.device = torch.device("cpu")
    proposer.supports_mm_inputs = False
    proposer.parallel_drafting = False
    proposer.use_local_argmax_reduction = False
    if hasattr(proposer, "_create_draft_vllm_config"):  # derives the drafter's VllmConfig from a real one
        proposer._create_draft_vllm_config = lambda: proposer.vllm_config
    proposer.load_model(target)
    assert proposer.model is drafter
    return drafter


def assert_shares_language_model(drafter: StandInDrafter, target: nn.Module) -> None:
    """``load_model`` ran past the token branch with the target's language model."""
    language_model = target.get_language_model()
    assert drafter.model.embed_tokens is language_model.model.embed_tokens
    assert drafter.lm_head is language_model.lm_head


def loaded_token(target: nn.Module, monkeypatch: pytest.MonkeyPatch) -> Optional[int]:
    """The image token the drafter got; a failure naming the field if ``load_model`` read one the config lacks."""
    try:
        drafter = load_drafter(target, monkeypatch)
    except AttributeError as error:
        if error.obj is not target.config:
            raise
        pytest.fail(f"load_model reads a field {type(target.config).__name__} lacks: {error}")
    assert_shares_language_model(drafter, target)
    return drafter.config.image_token_index


# --------------------------------------------------------------------------- e. the token
