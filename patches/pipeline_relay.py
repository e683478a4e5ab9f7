"""Carry a patched decoder's aux states across pipeline ranks, as vLLM does for its opted-in models.

Where the release's model runner relays aux states for a decoder that declares
``supports_aux_hidden_states_over_pp`` (``eagle3_utils.py``), a patched decoder declares it too: each rank captures
the ids of its own layers (id ``k`` is the stream entering layer ``k``; ``n`` on the last rank), sends them on in
``IntermediateTensors`` after the slots of the ranks before it, and the last rank puts what arrived first.  It
needs the shape every staged vLLM decoder has: one ``return IntermediateTensors(...)`` for the non-last ranks after
the loop, an ``intermediate_tensors`` parameter and ``self.config``; elsewhere the setter refuses ids on earlier
ranks.  Which releases relay, and how the slots are counted: ``docs/drafters.md``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    assigns_self_attribute,
    cst,
    find,
    is_name,
    mark_line,
    method,
    replace_node,
)
from vllm_eagle3_patch.patches.decoder_loop import DecoderForward, is_handing_on

OVER_PP = "supports_aux_hidden_states_over_pp"
SENT_ON = "aux_hidden_states_sent_on"
RECEIVED = "aux_hidden_states_received"
PARAMETER = "intermediate_tensors"


class Carrier(enum.Enum):
    """Who carries the aux states that earlier pipeline ranks capture to the drafter's rank."""

    NOBODY = "nobody"
    THIS_TOOL = "this tool"
    """The patched forward sends and receives them (this module)."""
    UPSTREAMS_MIXIN = "upstream's EagleModelMixin"
    """The decoder runs the mixin's forward (0.30.0+), whose own setter lays out their slots."""


@dataclass(frozen=True)
class OverRanks:
    """What a patched setter does with ids that earlier pipeline ranks capture: ``carrier`` carries
    them, or, where nobody does, the setter refuses them and its error says ``refusal``."""

    carrier: Carrier
    refusal: str = ""

    @classmethod
    def refused(cls, why: str) -> OverRanks:
        return cls(Carrier.NOBODY, why)


NO_RELAY = OverRanks.refused("this vLLM sends no aux hidden states across ranks")
"""Releases before 0.30.0: no runner carries the states of ids on earlier ranks."""
RELAYED = OverRanks(Carrier.THIS_TOOL)
MIXIN_RELAYS = OverRanks(Carrier.UPSTREAMS_MIXIN)


def why_not_relayed(model: cst.ClassDef, forward: DecoderForward) -> Optional[str]:
    """None where ``model``'s ``forward`` (read around its decoder loop) can carry aux states across ranks,
    else what it lacks (the setter's refusal says it)."""
    params = forward.function.params
    parameters = [p.name.value for p in (*params.params, *params.kwonly_params)]
    if PARAMETER not in parameters:
        return f"{model.name.value}.forward takes no {PARAMETER}"
    if not assigns_self_attribute(method(model, "__init__"), "config"):
        return f"{model.name.value} keeps no self.config, by whose hidden_size the runner reserves their slots"
    sending = _sending_returns(forward.after_loop)
    if len(sending) != 1 or _sending_returns([*forward.before_loop, *forward.from_last]):
        return f"{model.name.value}.forward has not one return IntermediateTensors(...) between its loop and its norm"
    return None


def _sending_returns(statements: list[cst.BaseStatement]) -> list[cst.Return]:
    return [r for statement in statements for r in find(statement, cst.Return, is_handing_on)]


def send_on(statement: cst.BaseStatement, aux: str) -> cst.BaseStatement:
    """``return IntermediateTensors(x)`` -> ``return self.aux_hidden_states_sent_on(IntermediateTensors(x), <aux>)``."""
    (line,) = find(statement, cst.SimpleStatementLine, lambda line: any(is_handing_on(s) for s in line.body))
    (returned,) = [s for s in line.body if is_handing_on(s)]
    assert returned.value is not None  # `IntermediateTensors(...)`: is_handing_on
    call = cst.Call(cst.parse_expression(f"self.{SENT_ON}"), args=[cst.Arg(returned.value), cst.Arg(cst.Name(aux))])
    return replace_node(statement, line, mark_line(replace_node(line, returned, returned.with_changes(value=call))))


def receive(aux: str) -> str:
    """What the last rank runs before it returns the aux states: the earlier ranks' come first."""
    return f"if self._aux_upstream_total_cached:\n    {aux} = self.{RECEIVED}({PARAMETER}) + {aux}\n"


def carries_aux_across_ranks(text: str) -> bool:
    """Whether a model file, as it stands or as ``apply`` would leave it, declares a decoder whose aux
    states cross pipeline ranks (upstream's opted-in models and this tool's alike)."""
    return f"{OVER_PP} = True" in text


def declares_relay(model: cst.ClassDef) -> bool:
    """Whether the model class already carries aux states (another family of its file patched it)."""
    lines = [line for line in model.body.body if isinstance(line, cst.SimpleStatementLine)]
    assigns = [s for line in lines for s in line.body if isinstance(s, cst.Assign)]
    return any(is_name(target.target, OVER_PP) for s in assigns for target in s.targets)


def declarations(key: str) -> str:
    """The class attributes the runner reads on the decoder (``eagle3_utils.py``)."""
    return (
        f'{OVER_PP} = True\nAUX_HIDDEN_STATE_KEY = "{key}"\n_aux_slot_base_cached = 0\n_aux_upstream_total_cached = 0\n'
    )


def methods() -> str:
    """The decoder's two relay methods."""
    return (
        f"def {SENT_ON}(self, intermediate_tensors, aux_hidden_states: list):\n"
        '    """This rank\'s aux states join the tensors sent to the next rank, after the earlier ranks\' slots."""\n'
        "    for offset, state in enumerate(aux_hidden_states):\n"
        '        intermediate_tensors[f"{self.AUX_HIDDEN_STATE_KEY}{self._aux_slot_base_cached + offset}"] = state\n'
        "    return intermediate_tensors\n"
        f"def {RECEIVED}(self, intermediate_tensors) -> list:\n"
        '    """The aux states captured on earlier pipeline ranks, in layer order."""\n'
        '    keys = [f"{self.AUX_HIDDEN_STATE_KEY}{slot}" for slot in range(self._aux_upstream_total_cached)]\n'
        "    if intermediate_tensors is None or any(key not in intermediate_tensors.tensors for key in keys):\n"
        "        raise RuntimeError(\n"
        '            f"vllm-eagle3-patch: {len(keys)} EAGLE-3 aux layer ids lie before layer {self.start_layer}, on "\n'
        '            "earlier pipeline ranks, and their states did not arrive: only vLLM\'s model runner V2 carries "\n'
        '            "them across ranks, and this engine runs V1 (its log says why; on 0.32 V2 refuses pipeline "\n'
        '            "parallelism with async scheduling): run V2, or serve with --pipeline-parallel-size 1"\n'
        "        )\n"
        "    return [intermediate_tensors[key] for key in keys]\n"
    )


def relaying_setter(decoder: str) -> str:
    """The setter on a release and decoder that carry aux states across ranks: ids before this rank's
    first layer arrive from upstream, in the first ``_aux_slot_base_cached`` slots."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        "    from vllm.distributed.parallel_state import get_pp_group, model_parallel_is_initialized\n"
        f"    decoder = {decoder}\n"
        "    decoder.aux_hidden_state_layers = layers\n"
        "    decoder._aux_slot_base_cached = decoder._aux_upstream_total_cached = 0\n"
        "    if model_parallel_is_initialized() and get_pp_group().world_size > 1:\n"
        "        upstream = {layer for layer in layers if 0 <= layer < decoder.start_layer}  # earlier ranks'\n"
        "        decoder._aux_slot_base_cached = len(upstream)\n"
        "        if get_pp_group().is_last_rank:\n"
        "            decoder._aux_upstream_total_cached = len(upstream)\n"
    )
