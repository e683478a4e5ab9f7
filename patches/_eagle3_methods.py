"""The two ``SupportsEagle3`` methods, written for whichever attribute holds the decoder.

Shared by the DeepSeek-V2 model (``self.model``) and the Kimi-K2.5 wrapper of 0.15.x, whose
``self.language_model`` is a bare ``DeepseekV2Model``.  Modules whose name starts with an
underscore are helpers, not targets.
"""

from __future__ import annotations

from typing import Optional


def eagle3_methods(decoder: str, aux_layers: Optional[tuple[int, ...]]) -> str:
    """Source of ``set_aux_hidden_state_layers`` and ``get_eagle3_aux_hidden_state_layers``.

    ``decoder`` is the expression of the ``DeepseekV2Model`` (e.g. ``self.model``).  With
    ``aux_layers`` the getter returns those ids and checks them against the layer count,
    which is only known once the model is built.
    """
    setter = (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    {decoder}.aux_hidden_state_layers = layers\n"
    )
    getter = "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
    if aux_layers is None:
        getter += f"    num_layers = len({decoder}.layers)\n    return (2, num_layers // 2, num_layers - 3)\n"
    else:
        getter += (
            f"    layers = {tuple(aux_layers)!r}  # vllm-eagle3-patch apply --aux-layers\n"
            f"    num_layers = len({decoder}.layers)\n"
            "    if any(not 0 <= layer <= num_layers for layer in layers):\n"
            "        raise ValueError(\n"
            '            f"vllm-eagle3-patch: EAGLE-3 aux layer ids {layers} must lie in 0..{num_layers} "\n'
            '            f"(this model has {num_layers} decoder layers); re-run apply with --aux-layers"\n'
            "        )\n"
            "    return layers\n"
        )
    return setter + getter


def delegating_methods(inner: str) -> str:
    """Both methods handed on to ``inner``, a model that implements them itself."""
    return (
        "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        f"    {inner}.set_aux_hidden_state_layers(layers)\n"
        "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
        f"    return {inner}.get_eagle3_aux_hidden_state_layers()\n"
    )
