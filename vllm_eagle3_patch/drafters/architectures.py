"""Every architecture the release registers, judged as vLLM's runner judges the class it holds.

The registry maps each ``architectures`` name to a module and class; the runner asks
``supports_eagle3`` of that class.  So each registered text-generation architecture is
``native`` (the class's chain declares EAGLE-3), ``patchable`` or ``patched`` (the chain holds a
family's causal LM, whose file ``apply`` patches), or ``refused``, with the reason.  ``status
--architectures`` shows the list beside the per-file rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..codemod.target import State
from ..discovery import Discovery
from ..eagle3.class_chain import Chain, ChainReader, registry_module
from ..plan import FilePlan, Plan
from ..registry import FAMILIES

VERDICTS = ("native", "patched", "patchable", "refused")


@dataclass(frozen=True)
class ArchitectureVerdict:
    architecture: str
    module: str
    cls: str
    verdict: str
    """One of :data:`VERDICTS`."""
    reason: str
    family: Optional[str] = None


def architecture_verdicts(plan: Plan) -> list[ArchitectureVerdict]:
    """One verdict per registered text-generation architecture, in the registry's order."""
    chains = ChainReader(plan.release.read)
    files = {file.path: file for file in plan.files}
    return [
        judge(architecture, module, cls, chains.registered(module, cls), files, plan.discovery)
        for architecture, (module, cls) in plan.release.text_generation_models.items()
    ]


def judge(
    architecture: str,
    module: str,
    cls: str,
    chain: Optional[Chain],
    files: dict[str, FilePlan],
    discovery: Discovery = Discovery(()),
) -> ArchitectureVerdict:
    def verdict(kind: str, reason: str, family: Optional[str] = None) -> ArchitectureVerdict:
        return ArchitectureVerdict(architecture, module, cls, kind, reason, family)

    if chain is None:
        return verdict("refused", f"{registry_module(module)} defines no class {cls} this tool can read")
    found = discovery.architectures.get(architecture)
    for family in (*FAMILIES, *([found] if found else [])):
        family_module = family.path.removesuffix(".py").replace("/", ".")
        if chain.includes(family_module, family.causal_lm) and family.path in files:
            file = files[family.path]
            why = f": {file.reason}" if file.state in (State.UNSUPPORTED, State.MODIFIED) else ""
            return verdict(
                _FROM_STATE[file.state], f"{family.name}: {file.path} is {file.state.value}{why}", family.name
            )
    if chain.declares_eagle3:
        holder = next((c for c in chain.classes if "SupportsEagle3" in {b.rsplit(".", 1)[-1] for b in c.bases}), None)
        where = f" (from {holder.module}.{holder.name})" if holder and holder.name != cls else ""
        return verdict("native", f"{cls} implements SupportsEagle3{where}")
    if found is not None:  # found by rule, but its file is another family's
        return verdict("refused", f"{found.path} is patched for another family, which does not cover {found.causal_lm}")
    return verdict(
        "refused",
        discovery.unrecognised.get(architecture)
        or f"{cls} ({module}.py) lacks SupportsEagle3, and no model family this tool patches serves it",
    )


_FROM_STATE = {
    State.NATIVE: "native",
    State.PATCHED: "patched",
    State.UNPATCHED: "patchable",
    State.UNSUPPORTED: "refused",
    State.MODIFIED: "refused",
}
