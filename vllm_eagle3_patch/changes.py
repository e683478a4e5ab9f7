"""Carry out a plan (``apply``) or undo it (``revert``): all files or none.

Order of operations, so that no moment leaves vLLM half-patched beyond repair or unseen:
the journal first (``install/journal.py``: a kill from here on is named by ``status``), then the
backups, the manifest naming both hashes of every file, each file replaced atomically, and the
journal removed last.  A failure rolls back the files already written; the next run after a kill
finishes or undoes it.
"""

from __future__ import annotations

import enum
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import __version__
from .catalog import every_patch
from .codemod.patch import Options, State
from .errors import ToolError
from .install.fileio import Staged, commit_all, drop_bytecode, restore_bytecode, stage_all, write_atomically
from .install.journal import Journal
from .install.locate import VllmInstall
from .install.lock import locked
from .install.manifest import STATE_DIR, FileRecord, Manifest, StateDir, sha256
from .install.record import Comparison, RecordCheck, compare_original
from .plan import FilePlan, Plan, make_plan, telling_first


class Done(str, enum.Enum):
    """What ``apply`` or ``revert`` did."""

    PATCHED = "patched"
    ALREADY_PATCHED = "already patched"
    NATIVE = "native"
    RESTORED = "restored"
    NOTHING_TO_REVERT = "nothing to revert"


class Refused(ToolError):
    """``apply``'s refusal of a file it cannot patch (unsupported) or must leave alone (modified), as facts:
    the install and the file.  ``render/messages.py`` words it; its own text is only the file's path."""

    def __init__(self, install: VllmInstall, file: FilePlan) -> None:
        super().__init__(file.path)
        self.install = install
        self.file = file


@dataclass(frozen=True)
class Outcome:
    """What a command did, as facts: ``render/`` says them, and ``--json`` carries them."""

    done: Done
    vllm_version: str
    files: tuple[str, ...] = ()
    originals: dict[str, str] = field(default_factory=dict)
    """How the original of every file named in the manifest compares with RECORD
    (``RecordCheck`` values): what ``apply`` kept, or what ``revert`` put back."""
    options: Optional[Options] = None
    """``apply``: the layer ids the patched files hand the drafter, and where they came from."""
    interrupted: Optional[str] = None
    """The command (``apply`` or ``revert``) of an interrupted run this one finished, undid or cleared away."""
    edited: tuple[str, ...] = ()
    """``apply``: files it left alone that were modified since install."""
    overwritten: tuple[str, ...] = ()
    """``revert --force``: files changed since apply whose changes are gone."""
    reinstalled: tuple[str, ...] = ()
    """``revert``: files left as they are, holding the installed vLLM's bytes again."""


def apply(
    install: VllmInstall,
    options: Optional[Options],
    accept_modified: bool = False,
    only: Optional[tuple[str, ...]] = None,
) -> Outcome:
    """Patch every file to patch, or refuse with nothing written.

    ``options`` None keeps the last apply's choices; ``accept_modified`` takes files that differ
    from vLLM's RECORD for their originals.
    """
    _refuse_unless_writable(install, options)
    plan = make_plan(install, options, accept_modified=accept_modified, only=only)
    _refuse_unless_applicable(plan)
    finished = None
    if plan.changes or plan.interruption:
        state_dir = StateDir(install.package_dir)
        with locked(state_dir):
            state_dir.sweep(f.path for f in plan.files)
            if not plan.is_current():  # another run changed something while we waited
                plan = make_plan(install, options, accept_modified=accept_modified, only=only)
            _refuse_unless_applicable(plan)
            if plan.changes:
                return _write_patches(plan)
            if plan.interruption:  # every file already holds what the killed run meant to write
                state_dir.clear_journal()
                finished = _interrupted(plan)
    if plan.files_state is State.NATIVE:
        return Outcome(Done.NATIVE, install.version, interrupted=finished, edited=_left_alone(plan))
    return Outcome(
        Done.ALREADY_PATCHED, install.version, options=plan.options, interrupted=finished, edited=_left_alone(plan)
    )


def _refuse_unless_writable(install: VllmInstall, options: Optional[Options]) -> None:
    """A user who may not write vLLM hears it at once, not after the patched texts are written out
    (seconds): unless every file the manifest names is as apply left it, and no new ids are asked
    for, so there may be nothing to write (the plan then says so)."""
    denied = unwritable(install.package_dir)
    if denied is None or (options is None and _as_applied(StateDir(install.package_dir))):
        return
    raise ToolError(
        f"{denied}: this user may not write here (Permission denied), and apply writes the patched files and "
        f"{STATE_DIR}/ in it; run apply as the user who installed vLLM (root in a Docker build). Nothing was changed"
    )


def _as_applied(state_dir: StateDir) -> bool:
    """Whether a finished apply's manifest names every file with the bytes it wrote (hashes only)."""
    manifest = state_dir.load_for_reading()[0]
    if manifest is None or not manifest.files or state_dir.journal_path.exists():
        return False
    return all(
        (state_dir.package_dir / path).is_file()
        and sha256((state_dir.package_dir / path).read_bytes()) == r.sha256_after
        for path, r in manifest.files.items()
    )


def _interrupted(plan: Plan) -> Optional[str]:
    """The command of the run a kill interrupted, which this one finishes or undoes (None: there is none)."""
    return plan.interruption.journal.command if plan.interruption else None


def _left_alone(plan: Plan) -> tuple[str, ...]:
    """Files apply does not touch that were edited since install: the user should hear of them."""
    return tuple(
        f.path for f in plan.files if not f.changes and f.installed and f.installed.check is RecordCheck.MODIFIED
    )


def _refuse_unless_applicable(plan: Plan) -> None:
    if plan.files_state is State.UNSUPPORTED:
        raise Refused(plan.install, min((f for f in plan.files if f.state is State.UNSUPPORTED), key=telling_first))
    if plan.files_state is State.MODIFIED:
        raise Refused(plan.install, next(f for f in plan.files if f.state is State.MODIFIED))


def _write_patches(plan: Plan) -> Outcome:
    """The journal, backups, the manifest (both hashes of every file it names), the files, then no journal."""
    state_dir = StateDir(plan.install.package_dir)
    state_dir.save_journal(Journal("apply", {c.path: sha256(_desired(c)) for c in plan.changes}))
    previous = plan.manifest
    records: dict[str, FileRecord] = {}
    backups: list[tuple[str, bytes]] = []  # (path, original) to save
    for file in plan.files:
        if file.changes:
            assert file.original is not None and file.desired is not None
            accepted = file.installed is not None and file.installed.check is RecordCheck.ACCEPTED
            record = FileRecord(sha256(file.original), sha256(file.desired), accepted)
            if not _backup_holds(state_dir, previous, file.path, record):
                backups.append((file.path, file.original))
            records[file.path] = record
        elif previous is not None and _holds_what_apply_wrote(previous, file):
            records[file.path] = previous.files[file.path]
    for path, original in backups:  # all checked before any is written: refusing changes nothing
        _refuse_to_lose_the_installed_original(plan.install, state_dir, path, sha256(original))
    manifest = Manifest(
        tool_version=__version__, vllm_version=plan.install.version, aux_layers=plan.options.aux_layers, files=records
    )
    _save_state(state_dir, previous, backups, [c.path for c in plan.changes], manifest)
    changes = plan.changes
    _replace_all(
        plan.install.package_dir,
        [(c.path, _desired(c), c.current) for c in changes],
        on_failure=lambda: _restore_manifest(state_dir, previous),  # the journal with it
    )
    for stale in set(previous.files if previous else ()) - set(records):
        state_dir.backup_path(stale).unlink(missing_ok=True)
    state_dir.clear_journal()
    names = tuple(c.path for c in changes)
    kept = {path: _compare(plan.install, path, r.sha256_before, r).check.value for path, r in records.items()}
    version, interrupted = plan.install.version, _interrupted(plan)
    return Outcome(Done.PATCHED, version, names, kept, plan.options, interrupted, _left_alone(plan))


def _desired(file: FilePlan) -> bytes:
    """The text ``apply`` leaves in a file it changes (one of ``Plan.changes``: it has one)."""
    assert file.desired is not None
    return file.desired


def _holds_what_apply_wrote(previous: Optional[Manifest], file: FilePlan) -> bool:
    """Whether ``file`` holds what an earlier ``apply`` wrote (patched, or a gate now short of types): its record
    and backup are kept."""
    return (
        previous is not None
        and file.path in previous.files
        and sha256(file.current) == previous.files[file.path].sha256_after
    )


def _refuse_to_lose_the_installed_original(install: VllmInstall, state_dir: StateDir, path: str, digest: str) -> None:
    """A backup that matches RECORD is never replaced by bytes that do not: it may be the last copy."""
    try:
        backup = state_dir.backup_path(path).read_bytes()
    except OSError:
        return
    if (
        _compare(install, path, sha256(backup)).check is RecordCheck.MATCHES
        and _compare(install, path, digest).check is not RecordCheck.MATCHES
    ):
        raise ToolError(
            f"{install.package_dir / path}: its backup is vLLM's original and the file differs from the installed "
            f"vLLM {install.version} (RECORD); `{install.command('revert', '--force')}` restores the original. "
            "Nothing was changed"
        )


def _compare(install: VllmInstall, path: str, digest: str, record: Optional[FileRecord] = None) -> Comparison:
    """The original's comparison with RECORD, as the manifest's ``accepted_modified`` tells it."""
    return compare_original(install.record, path, digest, record is not None and record.accepted_modified)


def _backup_holds(state_dir: StateDir, manifest: Optional[Manifest], path: str, record: FileRecord) -> bool:
    known = manifest.files.get(path) if manifest else None
    return known is not None and known.sha256_before == record.sha256_before and state_dir.backup_path(path).exists()


def revert(install: VllmInstall, force: bool = False) -> Outcome:
    """Put back the original bytes of every file the manifest names, then remove the state.

    ``force`` restores even over files changed since apply, and names each: those changes are gone.
    A file holding the installer's bytes again (reinstalled since apply) is left as it is, with or
    without ``force``: RECORD's bytes are never replaced by an edited original."""
    state_dir = StateDir(install.package_dir)
    if not state_dir.path.exists():
        return Outcome(Done.NOTHING_TO_REVERT, install.version)
    with locked(state_dir):
        manifest, journal = state_dir.load(), state_dir.load_journal()  # again under the lock
        if manifest is None:  # what a killed run left before its manifest, or another revert finished first
            shutil.rmtree(state_dir.path, ignore_errors=True)
            return Outcome(Done.NOTHING_TO_REVERT, install.version, interrupted=journal.command if journal else None)
        state_dir.sweep(manifest.files)
        restores, overwritten, reinstalled = [], [], []
        for path, record in manifest.files.items():
            file = install.package_dir / path
            current = file.read_bytes() if file.exists() else b""
            digest = sha256(current)
            if digest == record.sha256_before:
                continue
            if digest != record.sha256_after and _compare(install, path, digest).check is RecordCheck.MATCHES:
                reinstalled.append(path)  # the installer's own bytes, put back since apply: nothing to undo
                continue
            if digest != record.sha256_after:
                if not force:
                    raise ToolError(f"{file}: changed since apply; not reverting (use --force to restore the original)")
                overwritten.append(path)
            restores.append((path, state_dir.read_backup(path, record), current))
        state_dir.save_journal(Journal("revert", {path: sha256(original) for path, original, _ in restores}))
        _replace_all(install.package_dir, restores, on_failure=state_dir.clear_journal)
        for path, _, _ in restores:
            restore_bytecode(install.package_dir / path, state_dir.saved_bytecode(path))
        state_dir.manifest_path.unlink()  # first: backups without a manifest are harmless leftovers
        shutil.rmtree(state_dir.path)
    names = tuple(path for path, _, _ in restores)
    restored = {
        path: _compare(install, path, r.sha256_before, r).check.value
        for path, r in manifest.files.items()
        if path not in reinstalled
    }
    return Outcome(
        Done.RESTORED,
        install.version,
        names,
        restored,
        interrupted=journal.command if journal else None,
        overwritten=tuple(overwritten),
        reinstalled=tuple(reinstalled),
    )


def _save_state(
    state_dir: StateDir,
    previous: Optional[Manifest],
    backups: list[tuple[str, bytes]],
    changing: list[str],
    manifest: Manifest,
) -> None:
    """The backups, the installer's bytecode (before the manifest), then the manifest; where one cannot be written
    (a full disk, a file-size limit), the backups this run added are removed and the state is as it was: no vLLM
    file has been touched yet."""
    added = [state_dir.backup_path(path) for path, _ in backups if not state_dir.backup_path(path).exists()]
    kept = [state_dir.bytecode_dir(path) for path in changing if not state_dir.bytecode_dir(path).exists()]
    writing: Optional[Path] = None  # a backup's or bytecode's error names its file
    try:
        state_dir.save_backups(backups)
        state_dir.save_bytecode(changing)
        writing = state_dir.manifest_path
        state_dir.save(manifest)
    except OSError as error:
        for backup in added:
            backup.unlink(missing_ok=True)
        for directory in kept:
            shutil.rmtree(directory, ignore_errors=True)
        _restore_manifest(state_dir, previous)
        failed = writing or error.filename
        raise ToolError(f"{failed}: cannot write ({error.strerror or error}); nothing was changed") from None


def _replace_all(package_dir: Path, writes: list[tuple[str, bytes, bytes]], on_failure) -> None:
    """Write every ``(path, new, old)``: all staged beside their files first (a failure there changes none),
    then each renamed into place; if a rename fails, put back the ones already renamed."""
    try:
        staged = stage_all([(package_dir / path, new, None) for path, new, _ in writes])
    except OSError as error:
        on_failure()
        raise ToolError(f"{error.filename}: cannot write ({error.strerror or error}); nothing was changed") from None
    done: list[tuple[str, bytes]] = []

    def written(staged: Staged) -> None:
        path, _, old = writes[len(done)]
        done.append((path, old))  # in place: rolled back if anything after fails, its own bytecode drop included
        drop_bytecode(staged.path)

    try:
        commit_all(staged, after_each=written)
    except OSError as error:
        for path, old in reversed(done):
            write_atomically(package_dir / path, old)
            drop_bytecode(package_dir / path)
        on_failure()
        failed = error.filename
        raise ToolError(f"{failed}: cannot write ({error.strerror or error}); every file was rolled back") from None


def _restore_manifest(state_dir: StateDir, previous: Optional[Manifest]) -> None:
    """After a rollback: the state as it was before the run, and no journal (nothing is half-done)."""
    if previous is None:
        shutil.rmtree(state_dir.path, ignore_errors=True)
    else:
        state_dir.save(previous)
        state_dir.clear_journal()


def unwritable(package_dir: Path) -> Optional[Path]:
    """The first place apply writes that this user may not (None: it may write them all): the state
    directory (or the package, which will hold it) and the directories of the files to patch."""
    state_dir = package_dir / STATE_DIR
    places = [state_dir, state_dir / "lock"] if state_dir.is_dir() else [package_dir]
    places += dict.fromkeys((package_dir / patch.default_path).parent for patch in every_patch())
    return next((place for place in places if place.exists() and not os.access(place, os.W_OK)), None)
