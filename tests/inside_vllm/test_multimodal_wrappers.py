"""Patched multimodal wrappers found by rule: the class the runner holds passes ``supports_eagle3`` and hands both
methods on to its language model (or acts on its bare decoder), on the release's own classes.

Spec (every release with ``SupportsEagle3``, 0.10.1 and later):

g. Each multimodal class the tool found by rule passes ``supports_eagle3`` (class and instance).
h. ``set_aux_hidden_state_layers`` reaches its language model; the default-ids getter the runner calls returns
   the language model's.  A language model its checkpoint names that lacks EAGLE-3 is refused by name.
i. A bare decoder (upstream's, or a family's) gets the ids itself, and the getter gives (2, n // 2, n - 3).

Each class is made with ``object.__new__`` (its real ``__init__`` wants a full ``VllmConfig`` and checkpoint
files) and handed a stand-in language model; the methods, the bases and the protocol check are the release's.
"""

from __future__ import annotations

import importlib

import harness
import pytest
import tool_families
from assertions import release_supports_eagle3
from torch import nn

GETTER = harness.default_ids_getter()
WRAPPERS = tool_families.load().wrappers


class LanguageModel(nn.Module):
    """A causal LM with EAGLE-3: records the ids it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: tuple[int, ...] = ()

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.ids = tuple(layers)


setattr(LanguageModel, GETTER, lambda self: (2, 5, 9))


class WithoutEagle3(nn.Module):
    """A language model a checkpoint may name that lacks EAGLE-3."""


def wrapper_class(wrapper: tool_families.ToolWrapper) -> type:
    try:
        module = importlib.import_module(wrapper.module)
    except ImportError as error:  # an optional dependency of that model (its processor, an audio library)
        pytest.skip(f"{wrapper.module} does not import here: {error}")
    return getattr(module, wrapper.cls)


def shell(cls: type, attribute: str, language_model: nn.Module) -> nn.Module:
    """An instance of ``cls`` holding ``language_model``; an abstract base holding it for its subclasses
    (Keye's ``BaseKeyeModule``) is made concrete first."""
    if getattr(cls, "__abstractmethods__", None):
        cls = type(cls.__name__, (cls,), {})
        cls.__abstractmethods__ = frozenset()
    obj = object.__new__(cls)
    nn.Module.__init__(obj)
    setattr(obj, attribute, language_model)
    return obj


def test_the_tool_found_wrappers_here() -> None:
    assert len(WRAPPERS) >= 10, WRAPPERS


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if not w.bare], ids=lambda w: w.cls)
def test_the_wrapper_hands_eagle3_on_to_its_language_model(wrapper: tool_families.ToolWrapper) -> None:
    cls = wrapper_class(wrapper)
    supports_eagle3 = release_supports_eagle3()
    inner = LanguageModel()
    obj = shell(cls, wrapper.attribute, inner)
    assert supports_eagle3(cls) and supports_eagle3(obj)
    obj.set_aux_hidden_state_layers((1, 4, 6))
    assert inner.ids == (1, 4, 6)
    assert tuple(getattr(obj, GETTER)()) == (2, 5, 9)
    if wrapper.chosen_by_checkpoint:
        with pytest.raises(ValueError, match="vllm-eagle3-patch: EAGLE-3 needs a language model"):
            shell(cls, wrapper.attribute, WithoutEagle3()).set_aux_hidden_state_layers((1, 4, 6))


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if w.bare], ids=lambda w: w.cls)
def test_a_bare_decoder_gets_the_ids_itself(wrapper: tool_families.ToolWrapper) -> None:
    cls = wrapper_class(wrapper)
    supports_eagle3 = release_supports_eagle3()
    decoder_class = getattr(importlib.import_module(wrapper.module), wrapper.language_model)
    decoder = object.__new__(decoder_class)
    nn.Module.__init__(decoder)
    decoder.layers = nn.ModuleList(nn.Identity() for _ in range(8))
    decoder.start_layer, decoder.end_layer = 0, 8
    obj = shell(cls, wrapper.attribute, decoder)
    assert supports_eagle3(cls) and supports_eagle3(obj)
    obj.set_aux_hidden_state_layers((1, 4, 6))
    assert tuple(decoder.aux_hidden_state_layers) == (1, 4, 6)
    assert tuple(getattr(obj, GETTER)()) == (2, 4, 5)
