"""What the speculative-config gate does with a model's types: the second check a target must pass.

The runner's ``supports_eagle3`` and the gate in ``SpeculativeConfig`` are two checks; a class that
implements EAGLE-3 (Mistral's, on 0.17.1) is still refused where the gate's whitelist lacks its model
type.  ``status --architectures``, ``status --check --model`` and ``doctor`` all ask this one module,
as the gate stands now and as vLLM installed it (what an earlier ``apply`` opened).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..codemod.patch import State
from ..eagle3.release import gate_admits
from ..plan import FilePlan, Plan


@dataclass(frozen=True)
class GateVerdict:
    model_types: tuple[str, ...]
    refused: tuple[str, ...] = ()
    """The types the gate refuses as it stands."""
    opened: tuple[str, ...] = ()
    """The types it admits only because this tool patched it (the original refuses them)."""
    file: Optional[FilePlan] = None
    """The gate's row of the plan (None: this release has no gate file)."""

    @property
    def admits(self) -> bool:
        return not self.refused

    @property
    def apply_opens(self) -> bool:
        """Whether ``apply`` widens the gate (for every type the plan's families and native classes need)."""
        return self.file is not None and self.file.state is State.UNPATCHED


def gate_verdict(plan: Plan, model_types: tuple[str, ...]) -> GateVerdict:
    """The gate's answer for a model whose checkpoints name ``model_types``."""
    path = plan.release.gate_file
    file = next((f for f in plan.files if f.path == path), None)
    current = plan.release.read(path) if path else None
    refused = tuple(t for t in model_types if not gate_admits(current, t))
    original = current
    if file is not None and file.original is not None and file.original != file.current:
        original = file.original.decode("utf-8", "replace")  # the backup an earlier apply kept
    opened = tuple(t for t in model_types if t not in refused and not gate_admits(original, t))
    return GateVerdict(model_types, refused, opened, file)


def quoted(types: tuple[str, ...]) -> str:
    """``model type 'mistral'`` or ``model types 'deepseek_v3', 'kimi_k2'``, for a reason."""
    return f"model type{'s' if len(types) > 1 else ''} " + ", ".join(repr(t) for t in types)
