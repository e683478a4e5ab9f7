"""``verify``: prove the patch in the user's own environment before spending GPU hours.

The checks run in the target interpreter (``--python``, or this one), in a subprocess,
because only that interpreter has the torch and vLLM to import.  Where they cannot be
imported, the verdict falls back to the static plan and says so.
"""

from __future__ import annotations

import enum
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from ..catalog import FAMILIES
from ..codemod.patch import Policy, State
from ..eagle3.modules import import_name
from ..eagle3.release import GETTER
from ..plan import FilePlan, Plan
from .checks import Check, run_in_target
from .in_target import stand_in_checks

if TYPE_CHECKING:
    from .engine_check import Step

TIMEOUT_SECONDS = 900


class Expected(enum.Enum):
    """How a file to patch stands against what ``verify`` expects of it: patched or native."""

    MET = "met"
    """Patched or native: a pass."""
    LEFT_ALONE = "left alone"
    """An optional (model family) file ``apply`` leaves alone because it cannot patch it: a pass."""
    UNMET = "unmet"
    """Anything else: a failure."""


@dataclass(frozen=True)
class FileCheck:
    """One file's static check, as facts: the file, and how it stands (``render/words.py`` words it)."""

    file: FilePlan
    expected: Expected

    @property
    def ok(self) -> bool:
        return self.expected is not Expected.UNMET


@dataclass(frozen=True)
class Report:
    checks: tuple[Union[Check, FileCheck], ...]
    imported: bool
    """False: torch or vLLM could not be imported there; only the static checks ran."""
    import_error: Optional[str] = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    engine: Optional[dict] = None
    """``verify --engine``: the layer ids and the engine runs behind the engine checks."""

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)


def verify(
    plan: Plan, python: Optional[str], engine: bool = False, eager: bool = False, step: Optional[Step] = None
) -> Report:
    """The static and stand-in checks; with ``engine``, the tiny end-to-end engine runs too
    (compiled, as vLLM runs by default, unless ``eager``; ``step`` shows each step to the user)."""
    python = python or sys.executable
    static = static_checks(plan)
    stand_ins = run_stand_in_checks(plan, python)
    if not stand_ins.get("importable"):
        if engine:  # without torch and vLLM there is no engine to run: that is a failure here
            missing = Check("the engine runs EAGLE-3", False, f"cannot import torch/vLLM: {stand_ins.get('error')}")
            return Report(static + (missing,), imported=False, import_error=stand_ins.get("error"))
        return Report(static, imported=False, import_error=stand_ins.get("error"))
    dynamic = tuple(Check(c["name"], c["ok"], c["detail"]) for c in stand_ins["checks"])
    if not engine:
        return Report(static + dynamic, imported=True)
    from .engine_check import engine_checks  # here: it is only needed with --engine (and reads more)

    checks, runs = engine_checks(plan, python, eager, step)
    return Report(static + dynamic + checks, imported=True, engine=runs)


def static_checks(plan: Plan) -> tuple[Union[Check, FileCheck], ...]:
    """One check per file to patch, named by what the file is: patched or native is a pass, and so is
    an optional (model family) file that apply leaves alone because it cannot patch it; anything
    else fails, saying what was expected.  An interrupted apply or revert fails first."""
    interruption = plan.interruption
    interrupted = (
        ()
        if interruption is None
        else (Check("no apply or revert was interrupted", False, interruption.reason(plan.install.command)),)
    )
    return interrupted + tuple(file_check(f) for f in plan.files)


def file_check(file: FilePlan) -> FileCheck:
    if file.state in (State.PATCHED, State.NATIVE):
        return FileCheck(file, Expected.MET)
    if file.optional and file.state is State.UNSUPPORTED:
        return FileCheck(file, Expected.LEFT_ALONE)
    return FileCheck(file, Expected.UNMET)


def run_stand_in_checks(plan: Plan, python: str) -> dict:
    ids = ",".join(map(str, plan.options.aux_layers)) if plan.options.aux_layers is not None else ""
    families = json.dumps(families_to_check(plan))
    arguments = [ids, families, getter_asked(plan)]
    outcome = run_in_target(plan, python, Path(stand_in_checks.__file__), arguments, TIMEOUT_SECONDS)
    if "failed" in outcome:
        return {"importable": False, "error": f"the check process failed: {outcome['failed']}"}
    return outcome


def getter_asked(plan: Plan) -> str:
    """The name under which this release's runner asks a target for its default ids."""
    interface = plan.release.interface
    return interface.getter if interface is not None else GETTER  # no EAGLE-3: the checks fail either way


def families_to_check(plan: Plan) -> list[dict]:
    """What ``stand_in_checks`` checks: each family whose model file this vLLM has, not native,
    and ``apply`` does not leave alone (a required family always: failing it is the point of
    an unpatched run), and the multimodal wrappers found around it on the same terms; then every family found by rule
    whose file is patched or to be patched (``by_rule``: the protocol and the states); modules and
    classes by name."""
    present = {f.path for f in plan.files}
    left_alone = {f.path for f in plan.files if f.optional and f.state is State.UNSUPPORTED}
    native = {f.path for f in plan.files if f.state is State.NATIVE}  # upstream's code: not this tool's to prove

    def checked(path: str, required: bool = False) -> bool:
        return path in present and path not in native and (required or path not in left_alone)

    described = []
    for family in FAMILIES:
        required = family.policy is Policy.REQUIRED
        if not checked(family.path, required):
            continue
        wrappers = [
            {"module": import_name(w.wrapper.path), "cls": w.wrapper.cls, "language_model": w.wrapper.language_model}
            for w in plan.discovery.wrappers.values()
            if w.family is not None and w.family.name == family.name and checked(w.wrapper.path)
        ]
        described.append(
            {
                "module": import_name(family.path),
                "required": required,
                "model": family.model,
                "causal_lm": family.causal_lm,
                "decoder": family.decoder,
                "wrappers": list({w["cls"]: w for w in wrappers}.values()),
            }
        )
    by_rule = [family for family in plan.discovery.families if checked(family.path)]
    described += [
        {
            "module": import_name(family.path),
            "required": False,
            "model": family.model,
            "causal_lm": family.causal_lm,
            "decoder": family.decoder,
            "by_rule": True,
        }
        for family in by_rule
    ]
    return described
