"""Command line: ``vllm-eagle3-patch [--vllm-dir DIR | --python PATH] COMMAND``.

Exit codes: 0 done or nothing to do; 1 refused or failed (one line on stderr naming the
file and the reason); 2 usage error; 3 ``verify`` could run only its static checks (torch or
vLLM cannot be imported there) and ``--static`` did not say that is enough; 141 the reader of
stdout went away.  Under ``--json`` an error is one JSON object too (``output.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence, Union

from . import PROG, __version__, changes, output
from .architecture_verdicts import architecture_verdicts
from .catalog import FAMILIES
from .codemod.fewer_collections import fewer_collections
from .codemod.patch import Options, State
from .drafters import doctor, drafter_config
from .drafters.target_model import target_model
from .eagle3 import layer_ids
from .eagle3.release import Release
from .errors import ToolError
from .install.locate import VllmInstall, from_interpreter, from_package_dir
from .plan import make_plan
from .render import json_objects, text
from .render.messages import error_message
from .verification import verify

STATIC_ONLY = 3
"""``verify``'s exit status when only its static checks could run."""
AUX_STATES = 3
"""How many hidden states an EAGLE-3 drafter's fc concatenates."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in words  # known before parsing: a usage error answers in JSON too
    try:
        args = build_parser().parse_args(joined_values(words))
        with fewer_collections():  # the commands parse model files: big trees, no cycles
            result = args.run(args)
        return output.finish(result)
    except UsageError as usage:  # argparse's lines are on stderr already
        return output.error_object(str(usage), USAGE) if as_json else USAGE
    except BrokenPipeError:
        return output.reader_went_away()
    except ToolError as error:
        return output.error(error_message(error), 1, as_json)
    except OSError as error:
        return output.error(f"{error.filename or ''}: {error.strerror or error}", 1, as_json)
    except KeyboardInterrupt:
        return output.error("interrupted", 1, as_json)


USAGE = 2
"""The exit status of a usage error, as argparse's."""


def run() -> NoReturn:
    """The command line: :func:`main`, then out at once, as mypy leaves.  The interpreter would otherwise spend
    a tenth of a second freeing the trees the command parsed, and nothing is left to do: every file written is
    closed and fsynced, the lock released; only the standard streams may hold output yet."""
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the reader went away: ``main`` said so in its status
    os._exit(status)


class UsageError(Exception):
    """A bad command line, already said on stderr as argparse says it."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors reach :func:`main` (which answers in JSON under ``--json``)
    instead of exiting from inside the parse."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        command = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{command}: {message}" if command else message)


VALUE_OPTIONS = ("--aux-layers",)
"""Options whose value may start with ``-`` (``--aux-layers -1,2,3``)."""


def joined_values(words: list[str]) -> list[str]:
    """``--aux-layers -1,2,3`` as ``--aux-layers=-1,2,3``: argparse takes a word that starts with ``-``
    for an option and says only "expected one argument"; joined, the value reaches its own check,
    which says what is wrong with it."""
    joined: list[str] = []
    for word in words:
        if joined and joined[-1] in VALUE_OPTIONS and word[:1] == "-" and word[1:2].isdigit():
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=description(), epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_install_options(parser, default=None)
    add_output_options(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    status = commands.add_parser("status", help="show the vLLM found and the state of every target file")
    status.add_argument("--check", action="store_true", help="exit 1 unless the state is patched or native")
    status.add_argument(
        "--architectures",
        action="store_true",
        help="also judge every text-generation architecture the release registers, as its runner will "
        "(native, patchable, patched, or refused with the reason)",
    )
    status.add_argument(
        "--model",
        metavar="ARCH|DIR",
        help="say whether this model (an architecture name, or a checkpoint whose config.json names it) is an "
        "EAGLE-3 target on this install, in one line (with the command that makes it one); with --check, exit 0 "
        "when it is, whatever else is unpatched",
    )
    status.add_argument(
        "-v", "--verbose", action="store_true", help="with --model: also the whole install's state and every file"
    )
    status.set_defaults(run=run_status)

    diff = commands.add_parser("diff", help="print the unified diff apply would write (a dry run)")
    diff.set_defaults(run=run_diff)

    apply = commands.add_parser("apply", help="patch vLLM (all target files or none), keeping backups")
    apply.add_argument("--dry-run", action="store_true", help="show what would be written; write nothing")
    apply.add_argument(
        "--accept-modified",
        action="store_true",
        help="take files that differ from vLLM's RECORD (edited since install) as their originals; "
        "the manifest records it and revert restores those bytes",
    )
    ids = apply.add_mutually_exclusive_group()
    ids.add_argument(
        "--aux-layers",
        type=parse_layer_ids,
        metavar="IDS",
        action=RecordGiven,
        help="three comma-separated layer ids the patched target hands the drafter, e.g. 2,30,58 for a "
        "61-layer model; `default` returns to (2, n // 2, n - 3) (without the option: the ids of the last "
        "apply, else the default). They are checked against the layer count when vLLM loads the model",
    )
    ids.add_argument(
        "--aux-layers-from",
        type=Path,
        metavar="DRAFTER",
        help="read the ids from a drafter checkpoint directory or its config.json "
        "(eagle_aux_hidden_state_layer_ids, top level or in eagle_config); refused when their "
        "convention cannot be told and --ids-convention is not given",
    )
    apply.add_argument(
        "--ids-convention",
        choices=[c.value for c in drafter_config.Convention],
        help="with --aux-layers-from: the drafter's ids name layer inputs (vllm) or layer outputs "
        "(sglang, SpecForge: vLLM's ids are each one higher)",
    )
    for command in (apply, diff):
        command.add_argument(
            "--only",
            nargs="+",
            metavar="ARCH",
            help="only the model files serving these architectures (as in a checkpoint's config.json, e.g. "
            "DeepseekV3ForCausalLM MixtralForCausalLM), beside the gate and the proposer: a smaller diff. "
            "Without it, every architecture this vLLM registers that the tool recognises (status --architectures)",
        )
    apply.set_defaults(run=run_apply, usage_error=apply.error, aux_layers_given=False)

    revert = commands.add_parser("revert", help="restore the original bytes of every patched file")
    revert.add_argument("--force", action="store_true", help="restore originals even over files changed since apply")
    revert.set_defaults(run=run_revert)

    check = commands.add_parser(
        "verify",
        help="import the patched vLLM in the target interpreter and exercise it on CPU (needs torch, no GPU)",
    )
    check.add_argument(
        "--interpreter",
        metavar="PATH",
        help="the python that imports vLLM for the checks (default: --python's, else this one); useful with --vllm-dir",
    )
    check.add_argument(
        "--engine",
        action="store_true",
        help="also run the real engine end to end with tiny models built on the spot (no weights, no network; "
        "needs transformers; on a machine without a GPU an in-process CPU shim lets vLLM speculate): "
        "lossless greedy decoding, drafts accepted, the right aux states",
    )
    check.add_argument(
        "--eager",
        action="store_true",
        help="with --engine: run vLLM without torch.compile and CUDA graphs (default: compiled, as vLLM runs)",
    )
    check.add_argument(
        "--static",
        action="store_true",
        help=f"exit 0 on passing static checks even where torch or vLLM cannot be imported (else exit {STATIC_ONLY})",
    )
    check.set_defaults(run=run_verify)

    diagnose = commands.add_parser(
        "doctor",
        help="check a drafter against the target and this vLLM: architecture, sizes, and the layers "
        "vLLM will hand it (reads config.json files only; exit 1 unless consistent)",
    )
    diagnose.add_argument(
        "--drafter",
        type=Path,
        metavar="DIR",
        help="the drafter checkpoint: EAGLE-3, DFlash or DSpark (its config says which); without it, --target says "
        "what extract_hidden_states will save",
    )
    diagnose.add_argument("--target", type=Path, metavar="DIR", help="the target model checkpoint (its config.json)")
    diagnose.add_argument(
        "--layers",
        type=parse_saved_layer_ids,
        metavar="IDS",
        help="without --drafter: the ids extract_hidden_states is given (eagle_aux_hidden_state_layer_ids), "
        "e.g. 2,16,29; default: the target's own",
    )
    diagnose.set_defaults(run=run_doctor, usage=diagnose)

    for command in (status, diff, apply, revert, check, diagnose):
        add_install_options(command, default=argparse.SUPPRESS)  # also after the subcommand, as users type them
        add_output_options(command, default=argparse.SUPPRESS)
    return parser


EXIT_CODES = (
    "exit codes: 0 done or nothing to do; 1 refused or failed (one line on stderr); 2 usage error; "
    f"{STATIC_ONLY} verify ran only static checks (torch or vLLM not importable there; --static accepts that); "
    f"{output.READER_WENT_AWAY} the reader of stdout went away (diff | head)"
)


def description() -> str:
    """What the tool covers, from its own catalog, so it cannot go stale."""
    families = ", ".join(family.name for family in FAMILIES)
    return (
        f"Give an installed vLLM EAGLE-3 speculative decoding for the model families it lacks it for ({families}; "
        "`status` shows what this release needs), with dry-run diffs, backups and a byte-exact revert."
    )


def add_install_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """Which vLLM: before the subcommand, or (``default=SUPPRESS``, not overriding) after it."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--vllm-dir", type=Path, metavar="DIR", default=default, help="the vllm package directory to patch"
    )
    where.add_argument(
        "--python",
        metavar="PATH",
        default=default,
        help="patch the vLLM of this interpreter, or of this virtual environment's directory",
    )


def add_output_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """How to answer: before the subcommand, or (``default=SUPPRESS``, not overriding) after it."""
    parser.add_argument("--json", action="store_true", default=default, help="print one JSON object on stdout")
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="print nothing but errors; rely on the exit code"
    )


def parse_saved_layer_ids(text: str) -> tuple[int, ...]:
    """``2,16,29``: any number of distinct ids (extract_hidden_states saves as many as it is given)."""
    try:
        return layer_ids.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_layer_ids(text: str) -> Optional[tuple[int, ...]]:
    """``2,30,58``, three distinct ids (the drafter's fc reads three states); ``default``: None."""
    if text == "default":
        return None
    try:
        ids = layer_ids.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if len(ids) != AUX_STATES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected {AUX_STATES} distinct layer ids (an EAGLE-3 drafter's fc reads {AUX_STATES} "
            "hidden states), e.g. 2,30,58; or `default`"
        )
    return ids


def find_install(args: argparse.Namespace) -> VllmInstall:
    if args.vllm_dir is not None and args.python is not None:
        raise ToolError("--vllm-dir and --python each name a vLLM: give one of them")
    if args.vllm_dir is not None:
        return from_package_dir(args.vllm_dir)
    return from_interpreter(args.python)


def run_status(args: argparse.Namespace) -> int:
    plan = make_plan(find_install(args), states_only=True)
    model = target_model(plan, args.model) if args.model else None
    architectures = architecture_verdicts(plan) if args.architectures else None
    if args.json:
        output.emit_json(json_objects.status_object(plan, model, architectures))
    elif not args.quiet:
        if model is None or architectures is not None or args.verbose:
            text.print_status(plan)
        if architectures is not None:
            text.print_architectures(architectures)
        if model is not None:
            text.print_model(model, fix=plan.install.command("apply") if model.apply_fixes else None)
    if not args.check:
        return 0
    if model is not None:
        return 0 if model.ready else 1
    return 0 if plan.state in (State.PATCHED, State.NATIVE) else 1


def run_diff(args: argparse.Namespace) -> int:
    plan = make_plan(find_install(args), only=chosen_architectures(args))
    diff = text.unified_diff(plan)
    if args.json:
        output.emit_json(json_objects.diff_object(plan, diff))
    elif diff and not args.quiet:
        text.print_diff(diff)
    return 0


def chosen_options(args: argparse.Namespace) -> Optional[Options]:
    """The ids ``apply`` writes and where they come from; None: keep the last apply's."""
    if args.ids_convention and not args.aux_layers_from:
        args.usage_error("--ids-convention needs --aux-layers-from")
    if args.aux_layers_from:
        explicit = drafter_config.Convention(args.ids_convention) if args.ids_convention else None
        chosen = drafter_config.ids_for_apply(args.aux_layers_from, explicit)
        return Options(chosen.ids, source=chosen.explanation)
    if "aux_layers" in args and args.aux_layers_given:
        return Options(args.aux_layers, source="--aux-layers" if args.aux_layers else "--aux-layers default")
    return None


def chosen_architectures(args: argparse.Namespace) -> Optional[tuple[str, ...]]:
    return tuple(args.only) if args.only else None


def run_apply(args: argparse.Namespace) -> int:
    install, options = find_install(args), chosen_options(args)
    if args.dry_run:
        plan = make_plan(install, options, accept_modified=args.accept_modified, only=chosen_architectures(args))
        if args.json:
            output.emit_json(json_objects.dry_run_object(plan))
        elif not args.quiet:
            text.print_plan(plan)
        return 0
    if args.aux_layers_from and options is not None and options.aux_layers is not None:
        doctor.refuse_if_a_runner_reads_other_ids(
            Release(install.package_dir), args.aux_layers_from, options.aux_layers
        )
    outcome = changes.apply(install, options, accept_modified=args.accept_modified, only=chosen_architectures(args))
    return report(args, outcome, install)


def run_revert(args: argparse.Namespace) -> int:
    install = find_install(args)
    return report(args, changes.revert(install, force=args.force), install)


def run_verify(args: argparse.Namespace) -> int:
    install = find_install(args)
    plan = make_plan(install, states_only=True)
    step = text.step_reporter(sys.stderr) if args.engine and not args.quiet else None
    report = verify.verify(plan, args.interpreter or install.python, engine=args.engine, eager=args.eager, step=step)
    if args.json:
        output.emit_json(json_objects.verify_object(plan, report))
    elif not args.quiet:
        text.print_verify(report, static_enough=args.static)
    if not report.ok:
        return 1
    return 0 if report.imported or args.static else STATIC_ONLY


def run_doctor(args: argparse.Namespace) -> int:
    if args.drafter is None and args.target is None:
        args.usage.error("give --drafter DIR (and --target DIR), or --target DIR alone for extract_hidden_states")
    if args.drafter is not None and args.layers is not None:
        args.usage.error("--layers is for extract_hidden_states, without --drafter (a drafter names its own ids)")
    plan = make_plan(find_install(args), states_only=True)
    diagnosis = doctor.diagnose(plan, args.drafter, args.target, args.layers)
    if args.json:
        output.emit_json(json_objects.diagnosis_object(diagnosis))
    elif not args.quiet:
        text.print_diagnosis(diagnosis)
    return 0 if diagnosis.consistent else 1


class RecordGiven(argparse.Action):
    """Stores the value and that it was given: ``--aux-layers default`` parses to None."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.aux_layers_given = True


def report(args: argparse.Namespace, outcome: changes.Outcome, install: VllmInstall) -> int:
    if args.json:
        output.emit_json(json_objects.outcome_object(outcome, install))
    elif not args.quiet:
        text.print_outcome(outcome)
    return 0
