"""EAGLE-3 aux layer ids: from the command line or from a drafter's own config.

A drafter is trained on particular layers; releases before vLLM 0.12.0 ignore its
``eagle_aux_hidden_state_layer_ids`` and ask the target model instead, so ``apply`` can
write the drafter's ids into the target.  Reading them from the checkpoint avoids typos.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ToolError

FIELD = "eagle_aux_hidden_state_layer_ids"


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
    """``"1,29,57"`` -> ``(1, 29, 57)``."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r}: expected comma-separated integers, e.g. 1,29,57") from None
    return validate(ids, repr(text))


def from_drafter(path: Path) -> tuple[int, ...]:
    """The ids in a drafter checkpoint directory's ``config.json`` (or that file itself).

    Drafters put the field at the top level or inside an ``eagle_config`` block.
    """
    config_path = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ToolError(f"{config_path}: cannot read the drafter config ({error.strerror})") from None
    except ValueError as error:
        raise ToolError(f"{config_path}: not valid JSON ({error})") from None
    for block in (config, config.get("eagle_config") if isinstance(config, dict) else None):
        if isinstance(block, dict) and FIELD in block:
            try:
                return validate(block[FIELD], f"{config_path}: {FIELD}")
            except ValueError as error:
                raise ToolError(str(error)) from None
    raise ToolError(f"{config_path}: no {FIELD} (top level or in eagle_config) in this drafter config")
