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

from typing import Any, Optional

import pytest
from proposer_stand_ins import (
    IMAGE_TOKEN_ID,
    IMAGE_TOKEN_INDEX,
    MEDIA_PLACEHOLDER_TOKEN_ID,
    VISION_IMAGE_TOKEN_ID,
    KimiVLForConditionalGeneration,
    LlavaForConditionalGeneration,
    PictureVLForConditionalGeneration,
    PixtralForConditionalGeneration,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2AudioForConditionalGeneration,
    Qwen2VLForConditionalGeneration,
    kimi_k25_target,
    loaded_token,
    other_target_config,
    pixtral_like_config,
)
from transformers import LlavaConfig, Qwen2AudioConfig, Qwen2VLConfig
from vllm.transformers_utils.configs.kimi_vl import KimiVLConfig


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
