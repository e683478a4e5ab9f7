"""A synthetic family, "Toy", for the decoder and wrapper codemods' tests (no vLLM code here): its model
file's source in the usual shape, the codemod's patch of it, its multimodal wrapper, and a release that
holds them beside a runner and interfaces shaped like vLLM's."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from vllm_eagle3_patch.codemod.family import Family, Wrapper
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3

TOY = Family(
    "Toy",
    "model_executor/models/toy.py",
    "ToyModel",
    "ToyForCausalLM",
    ("toy",),
    wrapper=Wrapper("model_executor/models/toy_mm.py", "ToyForConditionalGeneration"),
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

NORM_TAIL = """\
        if not get_pp_group().is_last_rank:
            return IntermediateTensors(hidden_states, residual)

        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states"""

WRAPPER_SOURCE = """\
from .interfaces import SupportsMultiModal


class ToyForConditionalGeneration(nn.Module, SupportsMultiModal):

    def __init__(self, vllm_config):
        self.language_model = init_vllm_registered_model(vllm_config)
"""

RUNNER_WITH_EAGLE3 = "model.set_aux_hidden_state_layers(layers)"
INTERFACES_WITH_PROTOCOL = "class SupportsEagle3(Protocol):\n    pass\n"


def source(
    imports="from .interfaces import SupportsPP", loop=ISLICE_LOOP, tail=NORM_TAIL, bases="nn.Module, SupportsPP"
):
    return MODEL_TEMPLATE.format(imports=imports, loop=loop, tail=tail, bases=bases)


def patch(code: str, protocol: bool = True, aux_layers=None) -> str:
    return DecoderEagle3(TOY, protocol=protocol, aux_layers=aux_layers).transform_module(cst.parse_module(code)).code


def reader(runner=RUNNER_WITH_EAGLE3, interfaces=INTERFACES_WITH_PROTOCOL, **files):
    """A release holding the runner, the interfaces and ``files`` (``model=`` is Toy's model file)."""
    known = {
        "v1/worker/gpu_model_runner.py": runner,
        "model_executor/models/interfaces.py": interfaces,
        **{TOY.path if name == "model" else name: text for name, text in files.items()},
    }
    return Release(Path("/nowhere"), known.get)
