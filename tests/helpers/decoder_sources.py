"""A synthetic decoder model file and a release reader for the decoder codemods' tests (no vLLM code here)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.eagle3.release import DEFAULT_GETTER, GETTER, Release
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3

TOY = Family(
    "Toy",
    "model_executor/models/toy.py",
    "ToyModel",
    "ToyForCausalLM",
    ("toy",),
)

MODEL_TEMPLATE = """\
{imports}


class ToyModel(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = make_embedding(config)
        self.layers = make_layers(config)

    def forward(self, positions, intermediate_tensors):
        hidden_states, residual = intermediate_tensors
{loop}

{tail}


class ToyForCausalLM({bases}):

    def forward(self, x):
        return self.model(x)
"""

ISLICE_LOOP = """\
        for layer in islice(self.layers, self.start_layer, self.end_layer):
            hidden_states, residual = layer(positions, hidden_states, residual)"""

RANGE_LOOP = """\
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states, residual = layer(hidden_states, positions, residual)"""

SLICE_LOOP = """\
        for layer in self.layers[self.start_layer:self.end_layer]:
            hidden_states, residual = layer(
                positions,
                hidden_states,
                residual,
                **kwargs,
            )"""

NORM_TAIL = """\
        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)

        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states"""

NORM_IN_ELSE_TAIL = """\
        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)
        else:
            if residual is None:
                hidden_states = self.norm(hidden_states)
            else:
                hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states"""


def source(
    imports="from .interfaces import SupportsPP", loop=ISLICE_LOOP, tail=NORM_TAIL, bases="nn.Module, SupportsPP"
):
    return MODEL_TEMPLATE.format(imports=imports, loop=loop, tail=tail, bases=bases)


def patch(code: str, protocol: bool = True, aux_layers=None) -> str:
    return DecoderEagle3(TOY, protocol=protocol, aux_layers=aux_layers).transform_module(cst.parse_module(code)).code


def runner(getter: str = GETTER, protocol: bool = True) -> str:
    """A runner's EAGLE-3 wiring as the releases write it: check the protocol (0.10.1 on), ask the default ids,
    hand them over."""
    check = "from vllm.model_executor.models.interfaces import supports_eagle3\n\n\n" if protocol else ""
    asserted = "    assert supports_eagle3(model)\n" if protocol else ""
    return f"{check}def load_model(model):\n{asserted}    model.set_aux_hidden_state_layers(model.{getter}())\n"


RUNNER_WITH_EAGLE3 = runner()
MIXIN_RUNNER = runner(DEFAULT_GETTER)
"""A runner shaped like 0.18.0's and later: it asks SupportsEagle3's default ids by their new name."""
INTERFACES_WITH_PROTOCOL = "class SupportsEagle3(Protocol):\n    pass\n"


def reader(runner=RUNNER_WITH_EAGLE3, interfaces=INTERFACES_WITH_PROTOCOL, **files):
    known = {
        "v1/worker/gpu_model_runner.py": runner,
        "model_executor/models/interfaces.py": interfaces,
        **{TOY.path if name == "model" else name: text for name, text in files.items()},
    }
    return Release(Path("/nowhere"), known.get, files=lambda: tuple(sorted(known)))


CHILD = Family(
    "Toy child", "model_executor/models/toy_child.py", "ChildModel", "ChildForCausalLM", (), forward_from=TOY
)

CHILD_SOURCE = """\
from .interfaces import SupportsPP
from .toy import ToyModel


class ChildModel(ToyModel):

    def __init__(self, config):
        super(ToyModel, self).__init__()
        self.layers = make_layers(config)


class ChildForCausalLM(nn.Module, SupportsPP):

    def forward(self, x):
        return self.model(x)
"""


WRAPPER_SOURCE = """\
from .interfaces import SupportsMultiModal


class ToyForConditionalGeneration(nn.Module, SupportsMultiModal):

    def __init__(self, vllm_config):
        self.language_model = init_vllm_registered_model(vllm_config)
"""
"""A synthetic multimodal wrapper, for the decoder and wrapper codemods' tests."""
