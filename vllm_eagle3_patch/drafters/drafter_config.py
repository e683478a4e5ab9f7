"""A drafter's and a target's ``config.json``: the aux layer ids, where they are, and in which convention.

Two conventions name the same layers.  vLLM: id ``k`` is the residual stream entering
layer ``k`` (Hugging Face ``output_hidden_states[k]``).  SGLang (and SpecForge, which trains
for it) names layer outputs and captures ``k + 1``; so vLLM id = SGLang id + 1.  A config
does not say which it uses, so the evidence is weighed here, once, for ``apply
--aux-layers-from`` and for ``doctor`` alike; when it does not decide, the user must.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..eagle3 import layer_ids
from ..eagle3.methods import EAGLE3, Method
from ..eagle3.release import DRAFTER_IDS_FIELD as FIELD
from ..errors import ToolError


class Convention(str, enum.Enum):
    VLLM = "vllm"
    SGLANG = "sglang"

    def to_vllm(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The vLLM ids naming the same layers."""
        return ids if self is Convention.VLLM else tuple(i + 1 for i in ids)


class Location(str, enum.Enum):
    """Where a drafter config keeps its ids; vLLM (up to 0.18.x at least) reads only the top level."""

    TOP_LEVEL = "top level"
    EAGLE_CONFIG = "eagle_config"
    METHOD_FIELD = "the method's field"
    """A DFlash or DSpark drafter's own field (``dflash_config.target_layer_ids``): ``DrafterIds.field`` names it."""
    ABSENT = "absent"


@dataclass(frozen=True)
class ModelConfig:
    """A ``config.json`` and where it came from (for messages)."""

    path: Path
    data: dict[str, Any]

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def text(self) -> dict[str, Any]:
        """The language model's part: Kimi-K2.5 and other multimodal targets nest it in ``text_config``."""
        nested = self.data.get("text_config")
        return nested if isinstance(nested, dict) else self.data

    def number(self, key: str) -> Optional[int]:
        value = self.text.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def architecture(self) -> Optional[str]:
        architectures = self.data.get("architectures")
        if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
            return architectures[0]
        return None


def read_config(path: Path, what: str) -> ModelConfig:
    """``config.json`` of a checkpoint directory (or that file itself); a bad one is a ToolError."""
    config_path = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ToolError(f"{config_path}: cannot read the {what} config ({error.strerror})") from None
    except ValueError as error:
        raise ToolError(f"{config_path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise ToolError(f"{config_path}: expected a JSON object in the {what} config")
    return ModelConfig(config_path, data)


@dataclass(frozen=True)
class DrafterIds:
    """The ids a drafter config carries, as written, and where."""

    location: Location
    ids: Optional[tuple[int, ...]] = None
    plus: int = 0
    """What the drafter's convention for that field adds to make vLLM ids (``methods.LayerField.plus``)."""
    field: str = FIELD
    """Where they are, as written (``eagle_config.eagle_aux_hidden_state_layer_ids``, ``dflash_config.layer_ids``)."""


def drafter_ids(config: ModelConfig, method: Method = EAGLE3) -> DrafterIds:
    """An EAGLE-3 drafter's: top level first (where vLLM reads them), then ``eagle_config`` (where SpecForge writes
    them).  Another method's: the first of its fields (``Method.id_fields``) the config has."""
    if method is not EAGLE3 and method.drafts:
        return _method_ids(config, method)
    nested = config.data.get("eagle_config")
    for location, block in ((Location.TOP_LEVEL, config.data), (Location.EAGLE_CONFIG, nested)):
        if isinstance(block, dict) and FIELD in block:
            where = FIELD if location is Location.TOP_LEVEL else f"eagle_config.{FIELD}"
            try:
                return DrafterIds(location, layer_ids.validate(block[FIELD], f"{config.path}: {where}"), 0, where)
            except ValueError as error:
                raise ToolError(str(error)) from None
    return DrafterIds(Location.ABSENT)


def _method_ids(config: ModelConfig, method: Method) -> DrafterIds:
    for field in method.id_fields:
        value: object = config.data
        for key in field.name.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            try:
                ids = layer_ids.validate(value, f"{config.path}: {field.name}")
            except ValueError as error:
                raise ToolError(str(error)) from None
            return DrafterIds(Location.METHOD_FIELD, ids, field.plus, field.name)
    return DrafterIds(Location.ABSENT)


@dataclass(frozen=True)
class Inference:
    """The convention the evidence points to (None: it does not tell), and why."""

    convention: Optional[Convention]
    reason: str


def infer_convention(found: DrafterIds, num_layers: Optional[int] = None) -> Inference:
    """Weigh the evidence; never guess.

    - ids equal to ``(1, n // 2 - 1, n - 4)``, vLLM's default ``(2, n // 2, n - 3)`` minus
      one, are SGLang's default naming layer outputs: sglang;
    - ids at the top level, where vLLM reads them as its own (0.11.1+), are vLLM's;
    - ids nested under ``eagle_config`` are SpecForge's, usually but not always in SGLang's
      convention (its Kimi-K2 drafter says ``[2, 30, 58]``): undecided.

    ``num_layers`` is the target's; without it the pattern is matched for the layer
    count the ids themselves imply.
    """
    ids = found.ids
    if ids is None:
        return Inference(None, "the drafter config has no ids")
    layers = num_layers if num_layers is not None else ids[-1] + 4
    if ids == tuple(i - 1 for i in layer_ids.upstream_default(layers)):
        return Inference(
            Convention.SGLANG,
            f"{list(ids)} is (1, n // 2 - 1, n - 4) for n = {layers}: vLLM's default minus one, "
            "SGLang's default naming layer outputs",
        )
    if found.location is Location.TOP_LEVEL:
        return Inference(Convention.VLLM, "at the top level, where vLLM reads them as its own ids")
    default_note = ""
    if ids == layer_ids.upstream_default(ids[-1] + 3):
        default_note = f"; {list(ids)} is vLLM's default for {ids[-1] + 3} layers, yet SpecForge writes SGLang's"
    return Inference(
        None,
        "nested under eagle_config (SpecForge writes them there, usually in SGLang's convention) "
        f"and the numbers do not tell{default_note}",
    )


@dataclass(frozen=True)
class ChosenIds:
    """The vLLM ids ``apply --aux-layers-from`` writes, and the sentence that says why."""

    ids: tuple[int, ...]
    convention: Convention
    explanation: str


def ids_for_apply(path: Path, explicit: Optional[Convention]) -> ChosenIds:
    """The drafter's ids in vLLM's convention: inferred, or as the user said; refused when unclear."""
    config = read_config(path, "drafter")
    found = drafter_ids(config)
    if found.ids is None:
        raise ToolError(f"{config.path}: no {FIELD} (top level or in eagle_config) in this drafter config")
    inference = infer_convention(found)
    if explicit is not None:
        convention, why = explicit, "as given by --ids-convention"
        if inference.convention not in (None, explicit):
            why += f" (the config suggests {inference.convention.value}: {inference.reason})"
    elif inference.convention is not None:
        convention, why = inference.convention, inference.reason
    else:
        raise ToolError(
            f"{config.path}: cannot tell the convention of {FIELD} {list(found.ids)} ({inference.reason}); "
            "re-run with --ids-convention vllm or --ids-convention sglang (vLLM ids one higher)"
        )
    written = convention.to_vllm(found.ids)
    explanation = (
        f"{config.path}: {FIELD} {list(found.ids)} ({found.location.value}) taken as {convention.value} ids "
        f"({why}); vLLM ids: {', '.join(map(str, written))}"
    )
    return ChosenIds(written, convention, explanation)


def tensor_shapes(directory: Path) -> dict[str, list[int]]:
    """Tensor names and shapes from the headers of ``*.safetensors`` files (no weights are read).

    Unreadable or damaged files give nothing: the shapes only add checks, never refuse.
    """
    shapes: dict[str, list[int]] = {}
    if not directory.is_dir():
        return shapes
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with path.open("rb") as file:
                length = int.from_bytes(file.read(8), "little")
                if not 0 < length <= MAX_HEADER:
                    continue
                header = json.loads(file.read(length))
        except (OSError, ValueError):
            continue
        for name, entry in header.items() if isinstance(header, dict) else ():
            if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
                shapes[name] = entry["shape"]
    return shapes


MAX_HEADER = 100 * 1024 * 1024
"""The safetensors format's own limit on a header's size."""
