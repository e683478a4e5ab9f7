"""vLLM's EAGLE proposer shares the target's token embedding with the drafter, taken from
``get_language_model().model.embed_tokens`` (or ``.embedding``): a multimodal class the tool makes a target must
give it one, and a class the tool refuses for want of one would make the release's own ``load_model`` fail.

Spec (0.15.0 and later, where ``proposer_stand_ins.load_drafter`` runs the real ``load_model``):

j. Every multimodal class found by rule whose file the tool patches hands the proposer, through the release's own
   ``get_language_model``, a language model whose ``model.embed_tokens`` the drafter then shares.
k. Every class the tool refuses for that reason (a bare decoder of another file, one without an embedding) makes
   the release's ``load_model`` raise as the engine would start: its ``get_language_model()`` has no ``model``.
l. Every multimodal class the tool serves whose language model had no ``model`` (a class of the file the tool
   patches: Aria's ``AriaTextModel``, Molmo's ``MolmoModel``) hands the proposer that language model, which
   answers ``model`` with itself once patched, and the drafter shares the embedding it built.
m. Kimi-K2.5, the catalog's wrapper: its language model (a bare ``DeepseekV2Model`` on 0.15.x, answering ``model``
   with itself once patched; a ``DeepseekV2ForCausalLM`` from 0.16.0) gives the proposer the decoder's embedding.

Each class is made with ``object.__new__`` (its real ``__init__`` wants a full ``VllmConfig`` and checkpoint
files) and handed an instance, made the same way, of the class that holds its language model: the language
model's classes, ``get_language_model`` and the proposer's sharing are the release's.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest
import tool_families
from proposer_stand_ins import KIMI_K25, kimi_k25_target, load_drafter, other_target_config
from torch import nn

TOOL = tool_families.load()
WRAPPERS = [w for w in TOOL.wrappers if not w.bare]


def imported_module(module: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:  # an optional dependency of that model (its processor, an audio library)
        pytest.skip(f"{module} does not import here: {error}")


def imported(module: str, name: str) -> type:
    return getattr(imported_module(module), name)


def bare(cls: type) -> nn.Module:
    """An instance of ``cls`` without its ``__init__``; an abstract class (Keye's base) made concrete first."""
    if getattr(cls, "__abstractmethods__", None):
        cls = type(cls.__name__, (cls,), {})
        cls.__abstractmethods__ = frozenset()
    obj = object.__new__(cls)
    nn.Module.__init__(obj)
    return obj


def language_model_class(wrapper: tool_families.ToolWrapper) -> type:
    """The class the wrapper builds its language model from: imported by its file, or the registry's (a text
    architecture its checkpoint names: Llama's)."""
    if wrapper.chosen_by_checkpoint:
        return imported("vllm.model_executor.models.llama", "LlamaForCausalLM")
    module = imported_module(wrapper.module)
    if hasattr(module, wrapper.language_model):
        return getattr(module, wrapper.language_model)
    registry = importlib.import_module("vllm.model_executor.models.registry")
    registered, cls = registry._TEXT_GENERATION_MODELS[wrapper.language_model][:2]
    return imported(f"vllm.model_executor.models.{registered}", cls)


def target(cls: type, attribute: str, language_model: nn.Module) -> nn.Module:
    obj = bare(cls)
    obj.config = other_target_config()
    setattr(obj, attribute, language_model)
    return obj


def test_the_tool_found_wrappers_and_refusals_here() -> None:
    assert len(WRAPPERS) >= 10 and TOOL.refused_wrappers, (WRAPPERS, TOOL.refused_wrappers)


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.cls)
def test_the_proposer_shares_the_embedding_of_a_patched_wrapper(
    wrapper: tool_families.ToolWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    language_model = bare(language_model_class(wrapper))
    if isinstance(getattr(type(language_model), "model", None), property):
        pytest.skip(f"{type(language_model).__name__} shows its decoder as `model` (tests/codemods cover it)")
    language_model.model = nn.Module()
    language_model.model.embed_tokens = nn.Embedding(8, 4)
    obj = target(imported(wrapper.module, wrapper.cls), wrapper.attribute, language_model)
    assert obj.get_language_model() is language_model
    drafter = load_drafter(obj, monkeypatch)
    assert drafter.model.embed_tokens is language_model.model.embed_tokens


@pytest.mark.parametrize("refused", TOOL.refused_wrappers, ids=lambda w: w.cls)
def test_the_proposer_fails_on_a_refused_wrapper(
    refused: tool_families.RefusedWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoder = bare(imported(refused.language_model_module, refused.language_model))
    decoder.embed_tokens = nn.Embedding(8, 4)
    obj = target(imported(refused.module, refused.cls), refused.attribute, decoder)
    with pytest.raises((AttributeError, NotImplementedError)) as raised:
        load_drafter(obj, monkeypatch)
    assert isinstance(raised.value, NotImplementedError) or "'model'" in str(raised.value), raised.value


@pytest.mark.parametrize("answering", TOOL.answering_wrappers, ids=lambda w: w.cls)
def test_the_proposer_shares_the_embedding_of_a_language_model_answering_model_with_itself(
    answering: tool_families.AnsweringWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    language_model = bare(imported(answering.language_model_module, answering.language_model))
    assert language_model.model is language_model, f"{answering.language_model} has no read-only model (unpatched?)"
    setattr(language_model, answering.embedding, nn.Embedding(8, 4))
    obj = target(imported(answering.module, answering.cls), answering.attribute, language_model)
    drafter = load_drafter(obj, monkeypatch)
    assert drafter.model.embed_tokens is getattr(language_model, answering.embedding)
    assert dict(language_model.named_modules()).keys() == {"", answering.embedding}  # no module under `model`


def test_kimi_k25_gives_the_proposer_its_decoders_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    kimi = imported_module(KIMI_K25)
    deepseek = importlib.import_module("vllm.model_executor.models.deepseek_v2")
    decoder = bare(deepseek.DeepseekV2Model)
    decoder.embed_tokens = nn.Embedding(8, 4)
    language_model = decoder
    if "DeepseekV2Model(" not in inspect.getsource(kimi.KimiK25ForConditionalGeneration.__init__):
        language_model = bare(deepseek.DeepseekV2ForCausalLM)  # 0.16.0 on: the causal LM around it
        language_model.model = decoder
    target = kimi_k25_target()
    target.language_model = language_model
    assert target.get_language_model() is language_model
    drafter = load_drafter(target, monkeypatch)
    assert drafter.model.embed_tokens is decoder.embed_tokens
