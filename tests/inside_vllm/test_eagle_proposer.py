"""Patched ``v1/spec_decode/eagle.py``: the EAGLE drafter gets Kimi-K2.5's media token.

When the target is multimodal, ``load_model`` copies the target's image token id into the
drafter's ``config.image_token_index``, choosing the field by the target's class name.
Kimi-K2.5's config calls it ``media_placeholder_token_id`` and has no ``image_token_index``,
so the unpatched generic ``else`` raises AttributeError and the drafter never loads.

Spec (0.15.0-0.17.1, matching upstream 0.18.0):

e. For a ``KimiK25ForConditionalGeneration`` target the drafter's ``image_token_index`` is
   the target's ``media_placeholder_token_id``; every other multimodal target keeps the
   field it used before (``image_token_index`` generically, ``image_token_id`` for
   Qwen2.5-VL and its kin).

The tests call the release's real ``EagleProposer.load_model`` (defined on
``SpecDecodeBaseProposer`` in every one of these releases) on an instance made with
``object.__new__``: the real ``__init__`` wants a full ``VllmConfig`` and a device.  Only
the module-level names that need a GPU, a process group or checkpoint files are replaced
(``get_layers_from_vllm_config``, ``get_model``, ``get_pp_group``); ``set_model_tag``,
``_get_model`` (0.16.0+), ``supports_multimodal``, ``get_model_name`` and the
embedding/LM-head sharing that follows the token branch run for real.  The Kimi-K2.5
target is the release's own class holding the release's own ``KimiK25Config``.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import harness
import pytest
import torch
from packaging.version import Version
from torch import nn

VERSION = harness.vllm_version()
KIMI_K25_FIRST = Version("0.15.0")
if VERSION < KIMI_K25_FIRST:
    pytest.skip(
        f"vLLM {VERSION} has no kimi_k25.py (first shipped in 0.15.0), so no Kimi-K2.5 "
        "target for the EAGLE proposer to read a media token from",
        allow_module_level=True,
    )

from vllm.model_executor.models.interfaces import SupportsMultiModal  # noqa: E402

EAGLE = "vllm.v1.spec_decode.eagle"
KIMI_K25 = "vllm.model_executor.models.kimi_k25"

# Distinct ids, so an assertion tells which config field the proposer read.
MEDIA_PLACEHOLDER_TOKEN_ID = 163605  # Kimi-K2.5's real value
IMAGE_TOKEN_INDEX = 32000  # the generic field (LLaVA and most others)
IMAGE_TOKEN_ID = 151655  # the Qwen2.5-VL family's field


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


class LlavaForConditionalGeneration(nn.Module, SupportsMultiModal):
    """A multimodal target taking the generic branch (named as vLLM's LLaVA, whose real
    module needs ``mistral_common``, absent from the CPU venv)."""

    def __init__(self, config: types.SimpleNamespace) -> None:
        super().__init__()
        self.config = config
        self.language_model = StandInLanguageModel()

    def get_language_model(self) -> nn.Module:
        return self.language_model


class Qwen2_5_VLForConditionalGeneration(LlavaForConditionalGeneration):
    """A multimodal target the proposer reads ``image_token_id`` from (the real module
    needs ``torchvision``)."""


def other_target_config() -> types.SimpleNamespace:
    """Every field the proposer could read, each with its own id: a target other than
    Kimi-K2.5 must get the field it got before, not ``media_placeholder_token_id``."""
    return types.SimpleNamespace(
        image_token_index=IMAGE_TOKEN_INDEX,
        image_token_id=IMAGE_TOKEN_ID,
        media_placeholder_token_id=MEDIA_PLACEHOLDER_TOKEN_ID,
    )


def kimi_k25_target() -> nn.Module:
    """The release's ``KimiK25ForConditionalGeneration`` with its real ``KimiK25Config``.

    The real ``__init__`` builds a vision tower and a DeepSeek-V3 model, so the instance is
    made with ``object.__new__``; ``load_model`` only reads ``config`` and
    ``get_language_model()`` (which returns ``self.language_model``).
    """
    from vllm.transformers_utils.configs import KimiK25Config

    kimi = importlib.import_module(KIMI_K25)
    target = object.__new__(kimi.KimiK25ForConditionalGeneration)
    nn.Module.__init__(target)
    target.config = KimiK25Config(media_placeholder_token_id=MEDIA_PLACEHOLDER_TOKEN_ID)
    target.language_model = StandInLanguageModel()
    return target


def load_drafter(target: nn.Module, monkeypatch: pytest.MonkeyPatch) -> StandInDrafter:
    """Run the real ``EagleProposer.load_model(target)``; return the drafter it loaded.

    The proposer gets only the attributes ``load_model`` reads before and after the token
    branch: the draft model config (handed to ``get_model``), ``supports_mm_inputs=False``
    (skips probing the drafter for multimodal inputs), ``parallel_drafting=False``
    (0.16.0+) and ``use_local_argmax_reduction=False`` (0.17.0+).  No attention or indexer
    layers are found, and the pipeline has one rank.
    """
    eagle = importlib.import_module(EAGLE)
    drafter = StandInDrafter()
    speculative_config = types.SimpleNamespace(draft_model_config=object(), draft_load_config=object())

    def get_model(*, vllm_config: Any, model_config: Any, **kwargs: Any) -> nn.Module:
        assert model_config is speculative_config.draft_model_config, "not the drafter's config"
        return drafter

    monkeypatch.setattr(eagle, "get_layers_from_vllm_config", lambda *args, **kwargs: {})
    monkeypatch.setattr(eagle, "get_model", get_model)
    monkeypatch.setattr(eagle, "get_pp_group", lambda: types.SimpleNamespace(world_size=1))

    proposer = object.__new__(eagle.EagleProposer)
    proposer.vllm_config = types.SimpleNamespace(speculative_config=speculative_config)
    proposer.speculative_config = speculative_config
    proposer.device = torch.device("cpu")
    proposer.supports_mm_inputs = False
    proposer.parallel_drafting = False
    proposer.use_local_argmax_reduction = False
    proposer.load_model(target)
    assert proposer.model is drafter
    return drafter


def assert_shares_language_model(drafter: StandInDrafter, target: nn.Module) -> None:
    """``load_model`` ran past the token branch with the target's language model."""
    language_model = target.get_language_model()
    assert drafter.model.embed_tokens is language_model.model.embed_tokens
    assert drafter.lm_head is language_model.lm_head


# --------------------------------------------------------------------------- e. the token


def test_kimi_k25_target_gives_media_placeholder_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kimi-K2.5's config has no ``image_token_index``: unpatched, loading the drafter
    raises AttributeError; patched, the drafter gets ``media_placeholder_token_id``."""
    target = kimi_k25_target()
    assert not hasattr(target.config, "image_token_index"), "KimiK25Config gained the field"
    try:
        drafter = load_drafter(target, monkeypatch)
    except AttributeError as error:
        if error.obj is not target.config:
            raise
        pytest.fail(f"load_model still reads a field Kimi-K2.5's config lacks: {error}")
    assert drafter.config.image_token_index == MEDIA_PLACEHOLDER_TOKEN_ID
    assert_shares_language_model(drafter, target)


@pytest.mark.parametrize(
    ("target_class", "expected"),
    [
        (LlavaForConditionalGeneration, IMAGE_TOKEN_INDEX),
        (Qwen2_5_VLForConditionalGeneration, IMAGE_TOKEN_ID),
    ],
    ids=["generic-else", "qwen2_5_vl-image_token_id"],
)
def test_other_multimodal_targets_unchanged(
    target_class: type[LlavaForConditionalGeneration],
    expected: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Kimi-K2.5 branch is taken by name only: other targets read the field they read
    before, even when their config also has a ``media_placeholder_token_id``."""
    target = target_class(other_target_config())
    drafter = load_drafter(target, monkeypatch)
    assert drafter.config.image_token_index == expected
    assert_shares_language_model(drafter, target)
