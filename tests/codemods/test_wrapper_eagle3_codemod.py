"""The multimodal wrappers found by rule (Kimi-K2.5's and Gemma 3's among them), on small synthetic sources (no
vLLM code here): each class of a file gains ``SupportsEagle3`` and both methods, handed on to its language model,
acting on a bare model, or handed on with a named error where the checkpoint chooses a language model without
EAGLE-3.  The patched classes are run."""

from __future__ import annotations

import types

import pytest
from helpers.decoder_sources import TOY, WRAPPER_SOURCE, reader, source

from vllm_eagle3_patch.catalog import DEEPSEEK_V2, GEMMA3
from vllm_eagle3_patch.codemod.cst_tools import parse
from vllm_eagle3_patch.codemod.family import CHECKPOINTS_MODEL, FoundWrapper, Wrapper
from vllm_eagle3_patch.codemod.patch import Options, Policy, State
from vllm_eagle3_patch.eagle3.release import GETTER
from vllm_eagle3_patch.patches.wrapper_eagle3 import FoundWrappersEagle3, FoundWrappersPatch
from vllm_eagle3_patch.verdict_cache import StateCache

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

PATH = "model_executor/models/toy_mm.py"
TWO_CLASSES = (
    WRAPPER_SOURCE
    + """

class OtherForConditionalGeneration(nn.Module, SupportsMultiModal):

    def __init__(self, vllm_config):
        self.llm = init_vllm_registered_model(vllm_config)
"""
)


def found(cls: str = "ToyForConditionalGeneration", attribute: str = "self.language_model", **fields) -> FoundWrapper:
    return FoundWrapper(Wrapper(PATH, cls, language_model=attribute), **{"language_model": "ToyForCausalLM", **fields})


class Marker:
    """Stands in for ``SupportsEagle3``: a class listing it passes ``supports_eagle3``."""


class Module:
    """Stands in for ``nn.Module``."""


class MultiModal:
    """Stands in for ``SupportsMultiModal``."""


class LanguageModel:
    """A causal LM with EAGLE-3: records what it is handed."""

    def __init__(self) -> None:
        self.layers: tuple[int, ...] = ()

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        return (2, 5, 9)


def instance(namespace: dict, cls: str, attribute: str, language_model: object) -> object:
    obj = object.__new__(namespace[cls])
    setattr(obj, attribute, language_model)
    return obj


def test_each_class_of_the_file_hands_both_methods_on_to_its_language_model() -> None:
    ns = patched_module(TWO_CLASSES, found(), found("OtherForConditionalGeneration", "self.llm"))
    for cls, attribute in (("ToyForConditionalGeneration", "language_model"), ("OtherForConditionalGeneration", "llm")):
        assert issubclass(ns[cls], Marker)
        inner = LanguageModel()
        wrapper = instance(ns, cls, attribute, inner)
        wrapper.set_aux_hidden_state_layers((1, 4))
        assert inner.layers == (1, 4)
        assert getattr(wrapper, GETTER)() == (2, 5, 9)


def test_a_language_model_the_checkpoint_names_without_eagle3_is_refused_by_name() -> None:
    ns = patched_module(WRAPPER_SOURCE, found(language_model=CHECKPOINTS_MODEL))
    wrapper = instance(ns, "ToyForConditionalGeneration", "language_model", types.SimpleNamespace())
    with pytest.raises(ValueError, match="vllm-eagle3-patch: EAGLE-3 needs a language model .* SimpleNamespace"):
        wrapper.set_aux_hidden_state_layers((1, 4))
    inner = LanguageModel()
    wrapper = instance(ns, "ToyForConditionalGeneration", "language_model", inner)
    wrapper.set_aux_hidden_state_layers((3,))
    assert inner.layers == (3,)


def test_a_bare_model_gets_the_ids_itself() -> None:
    ns = patched_module(WRAPPER_SOURCE, found(bare=True, family=TOY))
    decoder = types.SimpleNamespace(layers=[object()] * 8, start_layer=0, aux_hidden_state_layers=())
    wrapper = instance(ns, "ToyForConditionalGeneration", "language_model", decoder)
    wrapper.set_aux_hidden_state_layers((1, 4, 6))
    assert decoder.aux_hidden_state_layers == (1, 4, 6)
    assert getattr(wrapper, GETTER)() == (2, 4, 5)


def test_fixed_ids_reach_a_bare_models_getter() -> None:
    patched = FoundWrappersEagle3((found(bare=True, family=TOY),), aux_layers=(1, 2, 3)).transform_module(
        parse(WRAPPER_SOURCE)
    )
    assert "        layers = (1, 2, 3)  # vllm-eagle3-patch apply --aux-layers\n" in patched.code


def test_a_family_bare_model_answers_model_in_the_familys_file_not_the_wrappers() -> None:
    """Kimi-K2.5 on 0.15.x holds a bare ``DeepseekV2Model``: the family's decoder patch gives it ``model``."""
    wrapper = found(language_model="ToyModel", bare=True, family=TOY, answers_model=True)
    assert "def model(self)" not in FoundWrappersEagle3((wrapper,)).transform_module(parse(WRAPPER_SOURCE)).code


def test_a_wrapper_of_the_required_family_must_be_patchable() -> None:
    """Kimi-K2.5 serves DeepSeek-V3, the tool's first purpose: an unpatchable wrapper of it blocks the run."""
    assert FoundWrappersPatch(PATH, (found(family=DEEPSEEK_V2),)).policy is Policy.BLOCKING
    assert FoundWrappersPatch(PATH, (found(family=GEMMA3),)).policy is Policy.OPTIONAL


def test_a_wrapper_that_already_implements_eagle3_is_native() -> None:
    native = WRAPPER_SOURCE.replace(
        "(nn.Module, SupportsMultiModal)", "(nn.Module, SupportsMultiModal, SupportsEagle3)"
    )
    verdict = FoundWrappersPatch(PATH, (found(family=TOY),)).examine(native, reader(model=source()), Options())
    assert verdict.state is State.NATIVE and "already implements" in verdict.reason


def patched_module(source_text: str, *wrappers: FoundWrapper) -> dict:
    text = FoundWrappersEagle3(wrappers).transform_module(parse(source_text)).code
    assert text.count("# vllm-eagle3-patch") == 1 + 3 * len(wrappers)  # the import, then each class and method
    text = text.replace("from .interfaces import SupportsMultiModal, SupportsEagle3  # vllm-eagle3-patch\n", "")
    namespace: dict = {
        "nn": types.SimpleNamespace(Module=Module),
        "SupportsMultiModal": MultiModal,
        "SupportsEagle3": Marker,
    }
    exec(compile(text, PATH, "exec"), namespace)  # noqa: S102 (the patched synthetic source, run)
    return namespace


@pytest.mark.parametrize(
    ("model", "state", "reason"),
    [
        (source(), State.UNPATCHED, "patchable"),
        (source(loop="        pass"), State.UNSUPPORTED, "toy.py is unsupported: expected a loop"),
        (None, State.UNSUPPORTED, "toy.py is missing"),
    ],
    ids=["family-patchable", "family-unsupported", "family-missing"],
)
def test_a_wrapper_follows_its_language_models_family(model, state, reason) -> None:
    files = {} if model is None else {"model": model}
    patch = FoundWrappersPatch(PATH, (found(family=TOY),))
    verdict = patch.examine(WRAPPER_SOURCE, reader(**files), Options())
    assert verdict.state is state and reason in verdict.reason, verdict.reason
    assert patch.policy is Policy.OPTIONAL  # a user of another model loses nothing when it cannot be patched


def test_a_native_or_checkpoint_language_model_needs_no_family_file() -> None:
    patch = FoundWrappersPatch(PATH, (found(), found("ToyForConditionalGeneration", language_model=CHECKPOINTS_MODEL)))
    assert len(patch.wrappers) == 1  # one class, once
    assert patch.examine(WRAPPER_SOURCE, reader(), Options()).state is State.UNPATCHED


BARE_OF_ITS_FILE = (
    WRAPPER_SOURCE.replace("init_vllm_registered_model(vllm_config)", "ToyTextModel(vllm_config)")
    + """

class ToyTextModel(nn.Module):

    def __init__(self, vllm_config):
        self.embed_tokens = vllm_config
"""
)


def test_a_bare_model_of_the_wrappers_file_answers_model_with_itself() -> None:
    """Aria's shape: the wrapper holds a bare decoder of its own file, where vLLM's proposer reads
    ``get_language_model().model.embed_tokens``; a read-only ``model`` answers it with the decoder itself, once."""
    wrapper = found(language_model="ToyTextModel", bare=True, answers_model=True)
    once = FoundWrappersEagle3((wrapper,)).transform_module(parse(BARE_OF_ITS_FILE))
    assert FoundWrappersEagle3((wrapper,)).transform_module(once).code.count("def model(self)") == 1
    text = once.code.replace("from .interfaces import SupportsMultiModal, SupportsEagle3  # vllm-eagle3-patch\n", "")
    namespace: dict = {
        "nn": types.SimpleNamespace(Module=Module),
        "SupportsMultiModal": MultiModal,
        "SupportsEagle3": Marker,
    }
    exec(compile(text, PATH, "exec"), namespace)  # noqa: S102 (the patched synthetic source, run)
    language_model = object.__new__(namespace["ToyTextModel"])
    language_model.embed_tokens = object()
    assert language_model.model is language_model
    assert language_model.model.embed_tokens is language_model.embed_tokens


def test_each_wrapper_cached_verdict_holds_what_judging_its_family_read(tmp_path) -> None:
    """Two wrappers of one language model judged in one command each keep, with their cached verdict, what judging
    the family's file read (here the search for the interface): a later command on a tree where that differs judges
    them afresh (a memo of the family's verdict shared by the two once kept it with the first only)."""
    patches = [FoundWrappersPatch(PATH, (found(family=TOY),)), FoundWrappersPatch(PATH, (found(family=TOY),))]
    sources = [WRAPPER_SOURCE, WRAPPER_SOURCE + "\n# the second wrapper's file\n"]
    without_eagle3 = reader(runner="", model=source())
    for patch, text in zip(patches, sources):
        verdict = StateCache(tmp_path).examine(patch, text, without_eagle3, Options())
        assert verdict.state is State.UNSUPPORTED, verdict.reason
    with_eagle3 = reader(model=source())
    for patch, text in zip(patches, sources):
        assert StateCache(tmp_path).examine(patch, text, with_eagle3, Options()).state is State.UNPATCHED
