"""Turn plans, outcomes and reports into text: unified diffs, status tables, verdicts.

Colour only on a terminal and never with ``NO_COLOR``; piped output is plain text.
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Iterator, Optional, TextIO

from ..architecture_verdicts import VERDICTS, ArchitectureVerdict
from ..changes import Outcome
from ..codemod.patch import Options, State
from ..drafters.doctor import Diagnosis
from ..drafters.doctor_facts import Assessment
from ..drafters.target_model import TargetModel
from ..eagle3.release import NEWEST_TESTED
from ..install.record import RecordCheck
from ..plan import Plan
from ..verification.engine_check import Step
from ..verification.verify import Report
from .doctor_words import finding_detail, finding_fix
from .json_objects import status_data
from .messages import outcome_message
from .plan_words import file_reason
from .words import architecture_reason, check_words, target_verdict

_STATE_STYLE = {
    State.PATCHED: "green",
    State.NATIVE: "green",
    State.UNPATCHED: "yellow",
    State.MODIFIED: "red",
    State.UNSUPPORTED: "red",
    State.INTERRUPTED: "red",
    State.UNKNOWN: "yellow",
}
NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(plan: Plan) -> str:
    """The diff ``apply`` would write, with paths ``a/vllm/...`` for ``patch -p1`` run beside ``vllm/``."""
    package = plan.install.package_dir.name
    chunks = []
    for change in plan.changes:
        assert change.desired is not None
        before = change.current.decode("utf-8").splitlines(keepends=True)
        after = change.desired.decode("utf-8").splitlines(keepends=True)
        path = f"{package}/{change.path}"
        lines = difflib.unified_diff(before, after, f"a/{path}", f"b/{path}")
        chunks.append(f"diff --git a/{path} b/{path}\n")
        chunks.extend(line if line.endswith("\n") else line + "\n" + NO_NEWLINE for line in lines)
    return "".join(chunks)


def print_architectures(verdicts: list[ArchitectureVerdict], stream: TextIO = sys.stdout) -> None:
    """One line per registered architecture, then the count of each verdict, for each kind."""
    width = max(len(v.architecture) for v in verdicts)
    stream.write(
        "architectures (the release's text-generation and multimodal registries, as its runner judges them):\n"
    )
    for verdict in verdicts:
        ranks = "; its aux states cross pipeline ranks" if verdict.over_pipeline_ranks else ""
        reason = architecture_reason(verdict)
        stream.write(f"  {verdict.verdict:<10} {verdict.kind:<10} {verdict.architecture:<{width}}  {reason}{ranks}\n")
    for kind in dict.fromkeys(v.kind for v in verdicts):
        of_kind = [v for v in verdicts if v.kind == kind]
        counts = ", ".join(f"{sum(v.verdict == verdict for v in of_kind)} {verdict}" for verdict in VERDICTS)
        stream.write(f"  {kind}: {counts} of {len(of_kind)}\n")
    served = next((v.methods for v in verdicts if v.verdict in ("native", "patched")), ())
    if served:  # the same for each: every method of the release reads the states through the same interface
        stream.write(f"  native and patched architectures serve: {', '.join(served)}\n")


def newer_line(version: str) -> str:
    return (
        f"note: vLLM {version} is newer than {NEWEST_TESTED}, the newest release this tool is tested on; "
        "its verdicts come from searching the installed tree, as on any release"
    )


def originals_line(plan: Plan) -> str:
    """Whether the originals this tool keeps can be checked against what the installer wrote."""
    install = plan.install
    if install.record is None:
        return "originals: cannot be checked (no RECORD beside the package: an editable or source install?)"
    unchecked = [
        (f.path, f.installed)
        for f in plan.files
        if f.installed is not None and f.installed.check is RecordCheck.UNCHECKED
    ]
    line = f"originals: checked against {install.record.path}"
    if unchecked:
        line += f" (not {', '.join(path for path, _ in unchecked)}: {unchecked[0][1].detail})"
    return line


def ids_text(options: Options) -> str:
    """``1, 2, 3 (--aux-layers)``: the ids and where they came from."""
    ids = ", ".join(map(str, options.aux_layers)) if options.aux_layers is not None else "(2, n // 2, n - 3)"
    return f"{ids} ({options.source})"


def aux_layers_text(plan: Plan) -> str:
    """The ids the patched target hands over; a drafter's own win only where the release reads them."""
    aux = plan.options.aux_layers
    text = ", ".join(map(str, aux)) if aux is not None else "(2, n // 2, n - 3)"
    if plan.release.reads_drafter_ids:
        return text + ", unless the drafter's config has top-level ids"
    return text + " (this vLLM ignores a drafter's ids)"


def print_outcome(outcome: Outcome, stream: Optional[TextIO] = None) -> None:
    """What ``apply`` or ``revert`` did, and the ids ``apply`` wrote (``stream`` None: stdout)."""
    print(outcome_message(outcome), file=stream)
    if outcome.options is not None:
        print(f"aux layer ids: {ids_text(outcome.options)}", file=stream)


def print_model(model: TargetModel, stream: Optional[TextIO] = None, fix: Optional[str] = None) -> None:
    """``status --model``: the model's verdict on this install, and the command that makes it a target where
    ``apply`` does (``stream`` None: stdout)."""
    print(f"model: {target_verdict(model)}" + (f"; fix: {fix}" if fix else ""), file=stream)


def use_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def print_status(plan: Plan, stream: TextIO = sys.stdout) -> None:
    data = status_data(plan)
    aux_text = aux_layers_text(plan)
    distribution = f" ({data['distribution']})" if data["distribution"] not in (None, "vllm") else ""
    if not use_colour(stream):
        stream.write(f"vLLM {data['vllm_version']}{distribution} at {data['vllm_dir']}\n")
        stream.write(f"state: {data['state']} ({data['reason']})\n")
        if "newer_than_tested" in data:
            stream.write(f"{newer_line(data['vllm_version'])}\n")
        stream.write(f"aux layer ids: {aux_text}\n")
        stream.write(f"{originals_line(plan)}\n")
        width = max(len(target["file"]) for target in data["targets"])
        for target in data["targets"]:
            stream.write(f"  {target['state']:<12} {target['file']:<{width}}  {target['reason']}\n")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream, highlight=False)  # its highlighter colours digits inside words: noise
    style = _STATE_STYLE[plan.state]
    console.print(f"vLLM [bold]{data['vllm_version']}[/]{escape(distribution)} at {escape(data['vllm_dir'])}")
    console.print(f"state: [{style}]{data['state']}[/] ({escape(data['reason'])})")
    if "newer_than_tested" in data:
        console.print(escape(newer_line(data["vllm_version"])))
    console.print(f"aux layer ids: {aux_text}")
    console.print(escape(originals_line(plan)))
    table = Table("file", "state", "reason")
    for file in plan.files:
        table.add_row(
            file.path, f"[{_STATE_STYLE[file.state]}]{file.state.value}[/]", escape(file_reason(file.because))
        )
    console.print(table)


def print_diff(diff: str, stream: TextIO = sys.stdout) -> None:
    if not use_colour(stream):
        stream.write(diff)
        return
    from rich.console import Console
    from rich.syntax import Syntax

    Console(file=stream).print(Syntax(diff, "diff", theme="ansi_dark", word_wrap=False))


def print_plan(plan: Plan, stream: TextIO = sys.stdout) -> None:
    """What ``apply --dry-run`` would do, file by file."""
    for file in plan.files:
        action = "would patch" if file.changes else f"leave ({file.state.value})"
        stream.write(f"{action:<20} {file.path}\n")


def step_reporter(stream: TextIO) -> Optional[Step]:
    """On a terminal: the step that is running and its elapsed time, then one line per step done,
    as pip and uv show long work.  Elsewhere (a pipe, a log, ``NO_COLOR`` aside): None, so piped
    and ``--json`` output stay as they are."""
    if not stream.isatty():
        return None
    import time
    from contextlib import contextmanager

    from rich.console import Console

    console = Console(file=stream, highlight=False, no_color="NO_COLOR" in os.environ)
    started = time.monotonic()

    @contextmanager
    def step(name: str) -> Iterator[None]:
        began = time.monotonic()
        with console.status(f"{name} ..."):
            yield
        console.print(f"[{time.monotonic() - started:5.0f} s] {name}: {time.monotonic() - began:.0f} s")

    return step


def verify_verdict(report: Report, static_enough: bool = False) -> str:
    why = f"torch/vLLM cannot be imported there ({report.import_error})"
    if not report.ok:
        return "FAIL" if report.imported else f"FAIL (static checks only: {why})"
    if not report.imported:
        if static_enough:
            return f"PASS (static checks only, as --static allows: {why})"
        return f"NOT VERIFIED (static checks passed, but {why}; the patched code never ran: --static accepts this)"
    return "PASS"


def print_verify(report: Report, stream: TextIO = sys.stdout, static_enough: bool = False) -> None:
    verdict = verify_verdict(report, static_enough)
    if not use_colour(stream):
        for check in report.checks:
            name, detail = check_words(check)
            stream.write(f"{'ok  ' if check.ok else 'FAIL'}  {name}: {detail}\n")
        stream.write(f"verdict: {verdict}\n")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream, highlight=False)
    table = Table("check", "result", "detail")
    for check in report.checks:
        name, detail = check_words(check)
        table.add_row(escape(name), "[green]ok[/]" if check.ok else "[red]FAIL[/]", escape(detail))
    console.print(table)
    colour = "green" if verdict.startswith("PASS") else "red"
    console.print(f"verdict: [{colour}]{escape(verdict)}[/]")


def print_diagnosis(diagnosis: Diagnosis, stream: Optional[TextIO] = None) -> None:
    """``doctor``: one line per check (with its fix where it is not ok), then the verdict (``stream`` None: stdout)."""
    for finding in diagnosis.findings:
        fix = finding_fix(finding, diagnosis)
        fix = f"; fix: {fix}" if fix and finding.verdict is not Assessment.OK else ""
        detail = finding_detail(finding, diagnosis)
        print(f"{finding.verdict.value:<8} {finding.check.value}: {detail}{fix}", file=stream)
    failing = [f for f in diagnosis.findings if f.verdict in (Assessment.PROBLEM, Assessment.UNKNOWN)]
    print(
        "verdict: consistent" if not failing else f"verdict: not consistent ({len(failing)} to fix or decide)",
        file=stream,
    )
