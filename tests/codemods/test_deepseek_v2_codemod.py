"""DeepSeek-V2/V3 through the generic decoder codemod, on a small synthetic source (no vLLM code here):
the whole patched text, written out, and its patch's verdicts.  The codemod's edge cases, for every
family, are in ``test_decoder_eagle3_codemod.py``."""

from __future__ import annotations

import pytest
from helpers.as_codemod import as_codemod
from helpers.decoder_sources import reader
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.catalog import DEEPSEEK_V2
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderPatch

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

PATCH = DecoderPatch(DEEPSEEK_V2)

MODEL_TEMPLATE = """\
{imports}


class DeepseekV2Model(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = make_embedding(config)
        self.layers = make_layers(config)

    def forward(self, positions, intermediate_tensors):
        hidden_states, residual = intermediate_tensors
{loop}

        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)

        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class DeepseekV2ForCausalLM({bases}):

    def forward(self, x):
        return self.model(x)
"""

ISLICE_LOOP = """\
        for layer in islice(self.layers, self.start_layer, self.end_layer):
            hidden_states, residual = layer(positions, hidden_states, residual)"""


def source(imports="from .interfaces import SupportsPP", loop=ISLICE_LOOP, bases="nn.Module, SupportsPP"):
    return MODEL_TEMPLATE.format(imports=imports, loop=loop, bases=bases)


class TestDeepseekV2Eagle3(CodemodTest):
    TRANSFORM = as_codemod(DecoderEagle3)

    def test_whole_transform(self) -> None:
        after = """\
from .interfaces import SupportsPP, SupportsEagle3  # vllm-eagle3-patch


class DeepseekV2Model(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = make_embedding(config)
        self.layers = make_layers(config)
        self.aux_hidden_state_layers = tuple[int, ...]()  # vllm-eagle3-patch

    def forward(self, positions, intermediate_tensors):
        hidden_states, residual = intermediate_tensors
        aux_hidden_states = []  # vllm-eagle3-patch
        aux_layer_ids = self.aux_hidden_state_layers  # vllm-eagle3-patch
        for aux_layer_idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer), start=self.start_layer):  # vllm-eagle3-patch
            if aux_layer_idx in aux_layer_ids:  # vllm-eagle3-patch
                aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)
            hidden_states, residual = layer(positions, hidden_states, residual)

        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)

        if self.end_layer in aux_layer_ids:  # vllm-eagle3-patch
            aux_hidden_states.append(hidden_states.clone() if residual is None else hidden_states + residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        if aux_hidden_states:  # vllm-eagle3-patch
            return hidden_states, aux_hidden_states
        return hidden_states


class DeepseekV2ForCausalLM(nn.Module, SupportsPP, SupportsEagle3):  # vllm-eagle3-patch

    def forward(self, x):
        return self.model(x)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:  # vllm-eagle3-patch
        decoder = self.model
        if any(layer < decoder.start_layer for layer in layers):  # an earlier pipeline rank's layer
            from vllm.distributed.parallel_state import get_pp_group
            from vllm.distributed.utils import get_pp_indices
            layer, ranks = min(layers), get_pp_group().world_size
            rank = next(r for r in range(ranks) if layer < get_pp_indices(len(decoder.layers), r, ranks)[1])
            raise ValueError(
                f"vllm-eagle3-patch: EAGLE-3 aux layer id {layer} lies on pipeline rank {rank}, but the drafter "
                f"runs on the last rank, which holds layers {decoder.start_layer}..{len(decoder.layers) - 1}, and "
                "this vLLM sends no aux hidden states across ranks: serve with --pipeline-parallel-size 1 "
                f"(--tensor-parallel-size instead), or with aux layer ids >= {decoder.start_layer}"
            )
        decoder.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:  # vllm-eagle3-patch
        num_layers = len(self.model.layers)
        if num_layers >= 7:
            return (2, num_layers // 2, num_layers - 3)
        if num_layers < 2:
            raise ValueError(
                f"vllm-eagle3-patch: EAGLE-3 needs 3 distinct aux hidden states; a model with {num_layers} "
                "decoder layers has fewer: use a target with 2 layers or more"
            )
        return (num_layers // 2 - 1, num_layers // 2, num_layers // 2 + 1)  # (2, n // 2, n - 3) would repeat ids
"""
        self.assertCodemod(source(), after, DEEPSEEK_V2)


def examine(code: str):
    return PATCH.examine(code, reader(), Options())


@pytest.mark.parametrize(
    ("mutation", "reason"),
    [
        (lambda s: s.replace("class DeepseekV2Model", "class DeepseekV2Net"), "class DeepseekV2Model"),
        (lambda s: s.replace(ISLICE_LOOP, "        pass"), "a loop over self.layers"),
        (lambda s: s.replace("def forward(self, x):", "def forward(self, x:"), "not valid Python"),
    ],
)
def test_unrecognised_sources_are_refused_with_the_reason(mutation, reason):
    """Through DeepSeek's own patch (the generic codemod's edge cases: test_decoder_eagle3_codemod.py)."""
    verdict = examine(mutation(source()))
    assert verdict.state is State.UNSUPPORTED
    assert reason in verdict.reason
    assert verdict.patched is None


def test_patched_source_is_recognised_as_patched():
    verdict = examine(source())
    assert verdict.state is State.UNPATCHED
    assert examine(verdict.patched).state is State.PATCHED


def test_upstream_support_is_native():
    native = source().replace(
        "    def forward(self, x):\n        return self.model(x)",
        "    def forward(self, x):\n        return self.model(x)\n\n    def get_eagle3_aux_hidden_state_layers(self):\n        return (2,)",
    )
    assert examine(native).state is State.NATIVE
