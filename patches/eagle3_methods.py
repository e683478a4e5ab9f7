"""The two ``SupportsEagle3`` methods, written for whichever attribute holds the decoder.

Shared by the families' causal LMs (``self.model``) and the multimodal wrappers, which act on a bare model they
hold or hand the methods on to their language model.  The getter's name is the one the release's runner asks for
(``eagle3/release.py``; ``docs/releases.md`` lists it per release).
"""

from __future__ import annotations

from typing import Optional

from vllm_eagle3_patch.eagle3.layer_ids import SMALLEST_DISTINCT_DEFAULT
from vllm_eagle3_patch.eagle3.release import GETTER
from vllm_eagle3_patch.patches.pipeline_relay import NO_RELAY, Carrier, OverRanks, relaying_setter


def eagle3_methods(
    decoder: str,
    aux_layers: Optional[tuple[int, ...]],
    getter: str = GETTER,
    layers: str = "layers",
    pipelined: bool = True,
    over_ranks: OverRanks = NO_RELAY,
) -> str:
    """Source of ``set_aux_hidden_state_layers`` and the getter ``getter``.

    ``decoder`` is the expression of the decoder model (e.g. ``self.model``).  With
    ``aux_layers`` the getter returns those ids and checks them against the layer count,
    which is only known once the model is built.  The default is
    ``layer_ids.patched_default``, written out.  ``over_ranks``: who carries the states of ids on
    earlier pipeline ranks, or why the setter refuses those ids (``pipeline_relay.py``).
    """
    written = (
        default_getter(decoder, getter, layers)
        if aux_layers is None
        else fixed_getter(decoder, aux_layers, getter, layers)
    )
    if not pipelined:
        return plain_setter(decoder) + written
    if over_ranks.carrier is Carrier.THIS_TOOL:
        return relaying_setter(decoder) + written
    if over_ranks.carrier is Carrier.UPSTREAMS_MIXIN:
        return mixin_setter(decoder) + written
    return pipeline_checked_setter(decoder, layers, over_ranks.refusal) + written


def plain_setter(decoder: str) -> str:
    """The setter of a model without pipeline parallelism: every id lies on its one rank."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    {decoder}.aux_hidden_state_layers = layers\n"
    )


def mixin_setter(decoder: str) -> str:
    """The setter of a decoder running upstream's ``EagleModelMixin`` capture: the mixin's own, which also
    lays out the pipeline slots of the ids its forward captures."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    {decoder}._set_aux_hidden_state_layers(layers)  # upstream's EagleModelMixin\n"
    )


def pipeline_checked_setter(decoder: str, layers: str = "layers", limit: str = NO_RELAY.refusal) -> str:
    """The setter, refusing ids that lie before this pipeline rank's first layer (``limit`` says why).

    Up to 0.29.x the runner calls it only on the last pipeline rank, the drafter's, and earlier
    ranks send on hidden states and residual but no aux states, so such an id would reach the
    drafter as nothing (a shape error in its fc, or worse).  From 0.30.0 model runner V2 calls it
    on every rank, and carries aux states only for decoders that relay them.
    """
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    decoder = {decoder}\n"
        "    if any(layer < decoder.start_layer for layer in layers):  # an earlier pipeline rank's layer\n"
        "        from vllm.distributed.parallel_state import get_pp_group\n"
        "        from vllm.distributed.utils import get_pp_indices\n"
        "        layer, ranks = min(layers), get_pp_group().world_size\n"
        f"        rank = next(r for r in range(ranks) if layer < get_pp_indices(len(decoder.{layers}), r, ranks)[1])\n"
        "        raise ValueError(\n"
        '            f"vllm-eagle3-patch: EAGLE-3 aux layer id {layer} lies on pipeline rank {rank}, '
        'but the drafter "\n'
        '            f"runs on the last rank, which holds layers '
        f'{{decoder.start_layer}}..{{len(decoder.{layers}) - 1}}, and "\n'
        f'            "{_escaped(limit)}: serve with --pipeline-parallel-size 1 "\n'
        '            f"(--tensor-parallel-size instead), or with aux layer ids >= {decoder.start_layer}"\n'
        "        )\n"
        "    decoder.aux_hidden_state_layers = layers\n"
    )


def _escaped(text: str) -> str:
    """``text`` inside a double-quoted string literal of the written code."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def default_getter(decoder: str, getter: str = GETTER, layers: str = "layers") -> str:
    return (
        f"def {getter}(self) -> tuple[int, ...]:\n"
        f"    num_layers = len({decoder}.{layers})\n"
        f"    if num_layers >= {SMALLEST_DISTINCT_DEFAULT}:\n"
        "        return (2, num_layers // 2, num_layers - 3)\n"
        "    if num_layers < 2:\n"
        "        raise ValueError(\n"
        '            f"vllm-eagle3-patch: EAGLE-3 needs 3 distinct aux hidden states; a model with {num_layers} "\n'
        '            "decoder layers has fewer: use a target with 2 layers or more"\n'
        "        )\n"
        "    return (num_layers // 2 - 1, num_layers // 2, num_layers // 2 + 1)"
        "  # (2, n // 2, n - 3) would repeat ids\n"
    )


def fixed_getter(decoder: str, aux_layers: tuple[int, ...], getter: str = GETTER, layers: str = "layers") -> str:
    return (
        f"def {getter}(self) -> tuple[int, ...]:\n"
        f"    layers = {tuple(aux_layers)!r}  # vllm-eagle3-patch apply --aux-layers\n"
        f"    num_layers = len({decoder}.{layers})\n"
        "    if any(not 0 <= layer <= num_layers for layer in layers):\n"
        "        raise ValueError(\n"
        '            f"vllm-eagle3-patch: EAGLE-3 aux layer ids {layers} must lie in 0..{num_layers} "\n'
        '            f"(this model has {num_layers} decoder layers); re-run apply with --aux-layers"\n'
        "        )\n"
        "    return layers\n"
    )


def delegating_methods(inner: str, getter: str = GETTER) -> str:
    """Both methods handed on to ``inner``, a model that implements them itself."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    {inner}.set_aux_hidden_state_layers(layers)\n"
        f"def {getter}(self) -> tuple[int, ...]:\n"
        f"    return {inner}.{getter}()\n"
    )


def checked_delegating_methods(inner: str, getter: str = GETTER) -> str:
    """Both methods handed on to ``inner``, a language model the checkpoint names: one without EAGLE-3 is
    refused by name when the runner sets the ids, not with an ``AttributeError`` deep in the engine."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f'    if not hasattr({inner}, "set_aux_hidden_state_layers"):\n'
        "        raise ValueError(\n"
        '            "vllm-eagle3-patch: EAGLE-3 needs a language model that collects aux hidden states; "\n'
        f'            f"{{type({inner}).__name__}} (named by the checkpoint\'s text config) does not: "\n'
        '            "`vllm-eagle3-patch status --architectures` lists those that do"\n'
        "        )\n"
        f"    {inner}.set_aux_hidden_state_layers(layers)\n"
        f"def {getter}(self) -> tuple[int, ...]:\n"
        f"    return {inner}.{getter}()\n"
    )
