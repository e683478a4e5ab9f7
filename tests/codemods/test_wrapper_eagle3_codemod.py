"""Edge cases of the multimodal wrapper codemod on small synthetic sources (no vLLM code here).

A wrapper hands both methods on to a language model that has them (Gemma 3, Kimi-K2.5 from 0.16.0),
or acts on the family's bare model where its ``__init__`` builds one (Kimi-K2.5 on 0.15.x).
"""

from __future__ import annotations

import pytest
from helpers.as_codemod import as_codemod
from helpers.decoder_sources import TOY, WRAPPER_SOURCE, patch, reader, source
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.catalog import DEEPSEEK_V2, GEMMA3
from vllm_eagle3_patch.codemod.patch import Options, Policy, State
from vllm_eagle3_patch.patches.wrapper_eagle3 import WrapperEagle3, WrapperPatch

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

BARE_SOURCE = WRAPPER_SOURCE.replace("init_vllm_registered_model(vllm_config)", "ToyModel(vllm_config)")
"""Kimi-K2.5 on 0.15.x: the wrapper builds the family's bare decoder as its language model."""


class TestWrapperEagle3(CodemodTest):
    TRANSFORM = as_codemod(WrapperEagle3)

    def test_wrapper_delegates_to_its_language_model(self) -> None:
        after = """\
from .interfaces import SupportsMultiModal, SupportsEagle3  # vllm-eagle3-patch


class ToyForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsEagle3):  # vllm-eagle3-patch

    def __init__(self, vllm_config):
        self.language_model = init_vllm_registered_model(vllm_config)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:  # vllm-eagle3-patch
        self.language_model.set_aux_hidden_state_layers(layers)

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:  # vllm-eagle3-patch
        return self.language_model.get_eagle3_aux_hidden_state_layers()
"""
        self.assertCodemod(WRAPPER_SOURCE, after, TOY.wrapper, TOY.model)


@pytest.mark.parametrize(
    ("model", "state", "reason"),
    [
        (source(), State.UNPATCHED, "patchable"),
        (patch(source()), State.UNPATCHED, "patchable"),
        (source(loop="        pass"), State.UNSUPPORTED, "toy.py is unsupported: expected a loop"),
        (None, State.UNSUPPORTED, "toy.py is missing"),
    ],
    ids=["model-patchable", "model-patched", "model-unsupported", "model-missing"],
)
def test_the_wrapper_follows_its_language_model(model, state, reason):
    files = {} if model is None else {"model": model}
    verdict = WrapperPatch(TOY).examine(WRAPPER_SOURCE, reader(**files), Options())
    assert verdict.state is state and reason in verdict.reason, verdict.reason


class TestBareDecoder(CodemodTest):
    TRANSFORM = as_codemod(WrapperEagle3)

    def test_a_bare_decoder_gets_the_methods_themselves(self) -> None:
        """The language model has no methods to hand on to: the wrapper acts on its decoder."""
        patched = WrapperPatch(TOY).examine(BARE_SOURCE, reader(model=source()), Options()).patched
        assert (
            "    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:  # vllm-eagle3-patch\n"
            in patched
        )
        assert "        decoder = self.language_model\n" in patched
        assert "        num_layers = len(self.language_model.layers)\n" in patched
        assert "self.language_model.set_aux_hidden_state_layers" not in patched
        compile(patched, "toy_mm.py", "exec")

    def test_fixed_ids_reach_a_bare_decoder_getter(self) -> None:
        patched = WrapperPatch(TOY).examine(BARE_SOURCE, reader(model=source()), Options(aux_layers=(1, 2, 3))).patched
        assert "        layers = (1, 2, 3)  # vllm-eagle3-patch apply --aux-layers\n" in patched

    def test_another_class_built_there_is_handed_on_to(self) -> None:
        """Only the family's own model class counts as bare: anything else must have the methods."""
        other = WRAPPER_SOURCE.replace("init_vllm_registered_model(vllm_config)", "OtherForCausalLM(vllm_config)")
        patched = WrapperPatch(TOY).examine(other, reader(model=source()), Options()).patched
        assert "        self.language_model.set_aux_hidden_state_layers(layers)\n" in patched


def test_a_wrapper_of_the_required_family_must_be_patchable():
    """Kimi-K2.5 serves DeepSeek-V3, the tool's first purpose: an unpatchable wrapper blocks the run."""
    assert WrapperPatch(DEEPSEEK_V2).policy is Policy.BLOCKING
    assert WrapperPatch(GEMMA3).policy is Policy.OPTIONAL


def test_a_wrapper_that_already_implements_eagle3_is_native():
    native = WRAPPER_SOURCE.replace(
        "(nn.Module, SupportsMultiModal)", "(nn.Module, SupportsMultiModal, SupportsEagle3)"
    )
    verdict = WrapperPatch(TOY).examine(native, reader(model=source()), Options())
    assert verdict.state is State.NATIVE and "already implements" in verdict.reason
