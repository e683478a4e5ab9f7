"""Patched EAGLE proposer: the drafter gets every multimodal target's image token, from the field its config has.

When the target is multimodal, ``load_model`` copies the target's image token id into the
drafter's ``config.image_token_index``, choosing the field by the target's class name: a few named
classes get the field vLLM knows they have, every other target ``config.image_token_index``.  A
config without that field (Qwen2-VL's ``image_token_id``, Kimi's ``media_placeholder_token_id``, a
Pixtral-like ``vision_config.image_token_id``, an audio-only target with no image token at all)
makes the unpatched generic branch raise AttributeError, and the drafter never loads.

Spec (0.15.0 and later; the file holding ``load_model`` is ``v1/spec_decode/eagle.py``, later
``llm_base_proposer.py``):

e. A target outside the release's named classes gets the first of ``image_token_index``,
   ``image_token_id``, ``vision_config.image_token_id``, ``media_placeholder_token_id`` its config
   has, or None where it has none; Kimi-K2.5 (named by upstream from 0.18.0) gets its media token.
f. A named class, and a config having ``image_token_index``, keep the field the release read.

The tests call the release's real ``EagleProposer.load_model`` (defined on
``SpecDecodeBaseProposer`` in every one of these releases) on an instance made with
``object.__new__``: the real ``__init__`` wants a full ``VllmConfig`` and a device.  Only
the module-level names that need a GPU, a process group or checkpoint files are replaced
(``get_layers_from_vllm_config``, ``get_model``, ``get_pp_group``, ``get_draft_load_config``
where the release has it), and the draft ``VllmConfig`` ``_get_model`` would derive is the
proposer's own; ``set_model_tag``, ``_get_model`` (0.16.0+), ``supports_multimodal``,
``get_model_name`` and the embedding/LM-head sharing that follows the token branch run for real.
The configs are transformers' own classes and the release's Kimi-K2.5 and Kimi-VL configs.
"""

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

from transformers import LlavaConfig, PixtralVisionConfig, PretrainedConfig, Qwen2AudioConfig, Qwen2VLConfig  # noqa: E402
from vllm.model_executor.models.interfaces import SupportsMultiModal  # noqa: E402
from vllm.transformers_utils.configs.kimi_vl import KimiVLConfig  # noqa: E402

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


def test_kimi_k25_target_gives_media_placeholder_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kimi-K2.5's config has no ``image_token_index``: unpatched (before 0.18.0), loading the
    drafter raises AttributeError; patched, the drafter gets ``media_placeholder_token_id``."""
    target = kimi_k25_target()
    assert not hasattr(target.config, "image_token_index"), f"{type(target.config).__name__} gained the field"
    assert loaded_token(target, monkeypatch) == MEDIA_PLACEHOLDER_TOKEN_ID


@pytest.mark.parametrize(
    ("target_class", "config", "expected"),
    [
        (Qwen2VLForConditionalGeneration, Qwen2VLConfig, IMAGE_TOKEN_ID),
        (PictureVLForConditionalGeneration, pixtral_like_config, VISION_IMAGE_TOKEN_ID),
        (KimiVLForConditionalGeneration, KimiVLConfig, MEDIA_PLACEHOLDER_TOKEN_ID),
        (Qwen2AudioForConditionalGeneration, Qwen2AudioConfig, None),
    ],
    ids=["qwen2_vl-image_token_id", "pixtral_like-vision_config", "kimi_vl-media_placeholder", "qwen2_audio-none"],
)
def test_a_config_without_image_token_index_gives_the_field_it_has(
    target_class: type[LlavaForConditionalGeneration],
    config: Any,
    expected: Optional[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Targets outside the release's named classes whose configs (transformers' and vLLM's own) lack
    ``image_token_index``: unpatched, loading the drafter raises; patched, the field the config has, or
    None for an audio-only target."""
    target = target_class(config())
    assert not hasattr(target.config, "image_token_index"), f"{config.__name__} gained the field"
    assert loaded_token(target, monkeypatch) == expected


# --------------------------------------------------------------------------- f. unchanged choices


@pytest.mark.parametrize(
    ("target_class", "config", "expected"),
    [
        (LlavaForConditionalGeneration, other_target_config, IMAGE_TOKEN_INDEX),
        (LlavaForConditionalGeneration, LlavaConfig, LlavaConfig().image_token_index),
        (Qwen2_5_VLForConditionalGeneration, other_target_config, IMAGE_TOKEN_ID),
        (PixtralForConditionalGeneration, other_target_config, VISION_IMAGE_TOKEN_ID),
    ],
    ids=["generic-every-field", "llava-image_token_index", "qwen2_5_vl-image_token_id", "pixtral-vision_config"],
)
def test_other_multimodal_targets_unchanged(
    target_class: type[LlavaForConditionalGeneration],
    config: Any,
    expected: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The release's named classes read the field they read before, and a config with
    ``image_token_index`` gives it, even when the config also has the other fields."""
    assert loaded_token(target_class(config()), monkeypatch) == expected
