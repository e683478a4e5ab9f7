"""EAGLE-3 aux layer ids: parsing, checking, and the default the patched getter returns.

Ids are vLLM's: id ``k`` is the residual stream entering decoder layer ``k`` (Hugging Face
``output_hidden_states[k]``), so ``0..n`` are all valid for an ``n``-layer model, ``n``
being the last layer's output.  Where ids come from a drafter's own config, and in which
convention, is ``drafters/drafter_config.py``'s business.
"""

from __future__ import annotations

from typing import Optional

SMALLEST_DISTINCT_DEFAULT = 7
"""Upstream's ``(2, n // 2, n - 3)`` repeats an id below this many layers (6 -> ``(2, 3, 3)``)."""


def validate(ids: object, source: str) -> tuple[int, ...]:
    """Non-negative integers, no repeats; whether they fit the model is checked when it loads."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"{source}: expected a non-empty list of layer ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"{source}: expected integer layer ids, got {list(ids)!r}")
    if any(i < 0 for i in ids):
        raise ValueError(f"{source}: layer ids must not be negative, got {list(ids)!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source}: a layer id is repeated in {list(ids)!r}")
    return tuple(ids)


def parse(text: str) -> tuple[int, ...]:
    """``"2,30,58"`` -> ``(2, 30, 58)``."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r}: expected comma-separated integers, e.g. 2,30,58") from None
    return validate(ids, repr(text))


def upstream_default(num_layers: int) -> tuple[int, int, int]:
    """vLLM's own default for DeepSeek (0.18.0+) and Llama: early, middle and late layers."""
    return (2, num_layers // 2, num_layers - 3)


def patched_default(num_layers: int) -> Optional[tuple[int, int, int]]:
    """What the patched ``get_eagle3_aux_hidden_state_layers`` returns (None: it refuses).

    Upstream's default wherever its ids are distinct (7 layers and more).  Smaller models
    get upstream's middle id and its two neighbours, ``(n // 2 - 1, n // 2, n // 2 + 1)``:
    three distinct states, as the drafter's fc expects, all within ``0..n``.  A model
    with fewer than 2 layers has only two states to give and is refused.
    """
    if num_layers >= SMALLEST_DISTINCT_DEFAULT:
        return upstream_default(num_layers)
    if num_layers >= 2:
        middle = num_layers // 2
        return (middle - 1, middle, middle + 1)
    return None
