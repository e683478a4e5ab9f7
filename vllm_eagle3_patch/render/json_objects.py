"""The ``--json`` objects of every command (their schema in ``docs/json.md``): one object per run, built
from the plan, the outcome or the report the command produced."""

from __future__ import annotations

from typing import Any, Optional, Union

from ..architecture_verdicts import ArchitectureVerdict
from ..changes import Outcome
from ..codemod.patch import Options
from ..drafters.doctor import Diagnosis
from ..drafters.target_model import TargetModel
from ..eagle3.release import NEWEST_TESTED, newer_than_tested
from ..install.journal import Interruption
from ..install.locate import VllmInstall
from ..plan import Plan
from ..verification.checks import Check
from ..verification.verify import FileCheck, Report
from .doctor_words import finding_detail, finding_fix
from .messages import outcome_message
from .plan_words import file_reason, plan_reason
from .words import architecture_reason, check_words, target_verdict


def status_data(plan: Plan) -> dict[str, Any]:
    """The ``status --json`` object (schema in ``docs/json.md``)."""
    record = plan.install.record
    return {
        "vllm_dir": str(plan.install.package_dir),
        "vllm_version": plan.install.version,
        "distribution": plan.install.distribution,
        "record": str(record.path) if record is not None else None,
        "state": plan.state.value,
        "reason": plan_reason(plan),
        "aux_layers": list(plan.options.aux_layers) if plan.options.aux_layers is not None else None,
        **({"unreadable_state": plan.unreadable_state} if plan.unreadable_state else {}),
        **({"interrupted": interruption_data(plan.interruption)} if plan.interruption else {}),
        **({"newer_than_tested": NEWEST_TESTED} if newer_than_tested(plan.install.version) else {}),
        "targets": [
            {
                "file": f.path,
                "state": f.state.value,
                "reason": file_reason(f.because),
                "original": f.installed.check.value if f.installed is not None else None,
            }
            for f in plan.files
        ],
    }


def interruption_data(interruption: Interruption) -> dict[str, Any]:
    """``status --json``'s ``interrupted``: the unfinished run, for a script to act on."""
    return {
        "command": interruption.journal.command,
        "written": interruption.written,
        "files": len(interruption.journal.files),
        "running": interruption.running,
        "temporaries": [str(path) for path in interruption.temporaries],
    }


def model_data(model: TargetModel) -> dict[str, Any]:
    """``status --model --json``: the model's verdict on this install."""
    return {
        "architecture": model.architecture,
        "module": model.module,
        "family": model.family.name if model.family else None,
        "target": model.ready,
        "methods": list(model.serves),
        "eagle3_target": model.ready,  # "target"'s old name, kept until 0.2.0 (docs/json.md)
        "verdict": target_verdict(model),
        "id_0_fails_at": model.first_layer_trap if model.serves else None,
        "id_n_fails_at": model.last_layer_unreached if model.serves else None,
        "files": {f.path: f.state.value for f in model.files},
    }


def ids_data(options: Options) -> dict[str, Any]:
    ids = list(options.aux_layers) if options.aux_layers is not None else None
    return {"aux_layers": ids, "aux_layers_source": options.source}


def verify_data(report: Report) -> dict[str, Any]:
    """The ``verify --json`` fields (added to the status object)."""
    return {
        "verified": report.ok,
        "imported": report.imported,
        "import_error": report.import_error,
        "checks": [_check_object(check) for check in report.checks],
        **({"engine": report.engine} if report.engine is not None else {}),
    }


def architecture_object(verdict: ArchitectureVerdict) -> dict[str, Any]:
    """One row of ``status --architectures --json``: the verdict, its reason worded, and its facts."""
    return {
        "architecture": verdict.architecture,
        "module": verdict.module,
        "cls": verdict.cls,
        "verdict": verdict.verdict,
        "reason": architecture_reason(verdict),
        "family": verdict.family,
        "over_pipeline_ranks": verdict.over_pipeline_ranks,
        "decoder_only": verdict.decoder_only,
        "kind": verdict.kind,
        "methods": list(verdict.methods),
    }


def _check_object(check: Union[Check, FileCheck]) -> dict[str, Any]:
    name, detail = check_words(check)
    return {"name": name, "ok": check.ok, "detail": detail}


def status_object(
    plan: Plan, model: Optional[TargetModel], architectures: Optional[list[ArchitectureVerdict]]
) -> dict[str, Any]:
    """``status --json``, with ``--model``'s verdict and ``--architectures``' rows where they were asked for."""
    extra: dict[str, Any] = {"model": model_data(model)} if model else {}
    if architectures is not None:
        extra["architectures"] = [architecture_object(verdict) for verdict in architectures]
    return {**status_data(plan), **extra}


def diff_object(plan: Plan, diff: str) -> dict[str, Any]:
    """``diff --json``: the status object and the diff ``apply`` would write."""
    return {**status_data(plan), "diff": diff}


def dry_run_object(plan: Plan) -> dict[str, Any]:
    """``apply --dry-run --json``: the status object and the files ``apply`` would write."""
    return {**status_data(plan), "would_change": [f.path for f in plan.changes]}


def verify_object(plan: Plan, report: Report) -> dict[str, Any]:
    """``verify --json``: the status object and the checks."""
    return {**status_data(plan), **verify_data(report)}


def outcome_object(outcome: Outcome, install: VllmInstall) -> dict[str, Any]:
    """``apply --json`` and ``revert --json``: what the run did, and the ids ``apply`` wrote."""
    ids = {} if outcome.options is None else ids_data(outcome.options)
    data = {"message": outcome_message(outcome), "files": list(outcome.files), "vllm_dir": str(install.package_dir)}
    return {**data, "originals": outcome.originals, **ids}


def diagnosis_object(diagnosis: Diagnosis) -> dict[str, Any]:
    """``doctor --json``: the findings, and the ids vLLM will capture against those the drafter expects."""
    install = diagnosis.plan.install
    return {
        "vllm_dir": str(install.package_dir),
        "vllm_version": install.version,
        "state": diagnosis.plan.state.value,
        "drafter": str(diagnosis.drafter.path) if diagnosis.drafter is not None else None,
        "target": str(diagnosis.target.path) if diagnosis.target else None,
        "consistent": diagnosis.consistent,
        "captured": list(diagnosis.captured) if diagnosis.captured is not None else None,
        "expected": list(diagnosis.expected) if diagnosis.expected is not None else None,
        "findings": [
            {
                "check": f.check.value,
                "verdict": f.verdict.value,
                "detail": finding_detail(f, diagnosis),
                "fix": finding_fix(f, diagnosis),
            }
            for f in diagnosis.findings
        ],
    }
