"""The plan: for every target file, what it is now, what it was, and what ``apply`` would write.

``status``, ``diff`` and ``apply`` all read the same plan; only what they do with it differs.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import __version__
from .errors import ToolError
from .families import DEEPSEEK_V2
from .locate import VllmInstall
from .manifest import FileRecord, Manifest, StateDir, sha256
from .record import Check, Comparison, compare_with_record
from .state_cache import StateCache, default_directory
from .target import Options, ReadFile, State, Target, Verdict


@dataclass(frozen=True)
class FilePlan:
    """One target file.  ``desired`` is the full text ``apply`` would leave (None: leave it)."""

    path: str
    """Relative to the ``vllm`` package directory."""
    target: str
    state: State
    reason: str
    current: bytes
    original: Optional[bytes] = None
    desired: Optional[bytes] = None
    installed: Optional[Comparison] = None
    """How ``original`` compares with vLLM's RECORD (None: there is no original to keep)."""
    refusal: Optional[str] = None
    """Why ``apply`` must leave a MODIFIED file alone, and the way out."""
    optional: bool = False
    """An unsupported optional file (a model family's) is left alone and does not block the others."""

    @property
    def changes(self) -> bool:
        return self.desired is not None and self.desired != self.current


@dataclass(frozen=True)
class Plan:
    install: VllmInstall
    files: tuple[FilePlan, ...]
    manifest: Optional[Manifest]
    options: Options

    @property
    def state(self) -> State:
        return overall_state(self.files)[0]

    @property
    def reason(self) -> str:
        reason = overall_state(self.files)[1]
        if self.manifest and self.manifest.vllm_version != self.install.version:
            reason += f" (the manifest is stale: written for vLLM {self.manifest.vllm_version})"
        return reason

    @property
    def changes(self) -> tuple[FilePlan, ...]:
        return tuple(f for f in self.files if f.changes)

    def is_current(self) -> bool:
        """Whether the files and the manifest are still what this plan read (cheap: hashes only)."""
        package_dir = self.install.package_dir
        for file in self.files:
            path = package_dir / file.path
            if not path.exists() or path.read_bytes() != file.current:
                return False
        return StateDir(package_dir).load() == self.manifest


def load_targets() -> tuple[Target, ...]:
    """Every ``TARGET`` in the ``patches`` package, in module-name order (``_helpers`` skipped)."""
    from . import patches

    names = sorted(info.name for info in pkgutil.iter_modules(patches.__path__) if not info.name.startswith("_"))
    return tuple(importlib.import_module(f"{patches.__name__}.{name}").TARGET for name in names)


def make_plan(
    install: VllmInstall,
    options: Optional[Options] = None,
    *,
    states_only: bool = False,
    accept_modified: bool = False,
) -> Plan:
    """Look at every target file of ``install``.

    ``options`` None means "as recorded": a later ``apply`` keeps the choices (layer ids)
    of the earlier one unless the user gives new ones.  ``states_only`` (``status``) skips
    writing out the patched texts: its files have no ``desired`` text.  ``accept_modified``
    takes files that differ from vLLM's RECORD for originals all the same.
    """
    state_dir = StateDir(install.package_dir)
    manifest = state_dir.load()
    recorded = Options(aux_layers=manifest.aux_layers if manifest else None)
    if options is None or options.aux_layers is None:
        options = recorded
    read = reader(install.package_dir)
    examine: Examine = StateCache(default_directory()).examine if states_only else _examine
    originals = Originals(install, accept_modified)
    files = []
    for target in load_targets():
        path = target.locate(install.package_dir)
        if path is None:
            if target.required:
                files.append(FilePlan(target.default_path, target.name, State.UNSUPPORTED, "file not found", b""))
            continue
        manifested = manifest.files.get(path) if manifest else None
        planned = _plan_file(target, path, read, state_dir, manifested, options, recorded, examine, originals)
        files.append(replace(planned, optional=target.optional))
    if not files:
        raise ToolError(f"{install.package_dir}: none of the files this tool patches is there")
    return Plan(install, tuple(files), manifest, options)


@dataclass(frozen=True)
class Originals:
    """Judges bytes as a file's original by vLLM's RECORD: what the installer wrote."""

    install: VllmInstall
    accept_modified: bool

    def compare(self, path: str, data: bytes) -> Comparison:
        return self.compare_digest(path, sha256(data))

    def compare_digest(self, path: str, digest: str) -> Comparison:
        return compare_with_record(self.install.record, path, digest)

    @property
    def differs(self) -> str:
        return f"differs from the installed vLLM {self.install.version} (RECORD)"

    def reinstall(self) -> str:
        name = self.install.distribution or "vllm"
        return f"`pip install --force-reinstall --no-deps {name}=={self.install.version}`"


def _plan_file(
    target: Target,
    path: str,
    read: ReadFile,
    state_dir: StateDir,
    manifested: Optional[FileRecord],
    options: Options,
    recorded: Options,
    examine: Examine,
    originals: Originals,
) -> FilePlan:
    current = (state_dir.package_dir / path).read_bytes()
    if manifested is not None and sha256(current) == manifested.sha256_after:
        original = state_dir.read_backup(path, manifested)
        # Re-run the codemod only when the options changed: status stays a hash check.
        desired = current if options == recorded else _text(_decoded(examine, target, original, read, options))
        installed = _accepted(manifested) or originals.compare_digest(path, manifested.sha256_before)
        reason = "applied by vllm-eagle3-patch" + _original_note(installed, originals, "the original it keeps was ")
        return FilePlan(path, target.name, State.PATCHED, reason, current, original, desired, installed)
    verdict = _decoded(examine, target, current, read, options)
    if verdict.state is State.PATCHED:
        if manifested is not None:
            reason = "changed since vllm-eagle3-patch applied it"
            return FilePlan(path, target.name, State.MODIFIED, reason, current, refusal=f"{reason}; run `revert --force` first")
        return FilePlan(path, target.name, State.PATCHED, "patched, but no manifest records it: revert cannot restore it", current)
    installed = originals.compare(path, current)
    if installed.check is Check.MODIFIED:
        if manifested is not None and originals.compare_digest(path, manifested.sha256_before).check is Check.MATCHES:
            # Edited after apply, marks and all: the backup is vLLM's original, these bytes never replace it.
            reason = f"changed since vllm-eagle3-patch applied it (its marks are gone) and {originals.differs}"
            refusal = f"{reason}; `revert --force` restores vLLM's original"
            return FilePlan(path, target.name, State.MODIFIED, reason, current, installed=installed, refusal=refusal)
        if originals.accept_modified:
            installed = Comparison(Check.ACCEPTED, f"{installed.detail}, taken as the original (--accept-modified)")
        elif verdict.state is State.UNPATCHED:
            reason = f"modified since install: {originals.differs}"
            refusal = (
                f"{originals.differs}; reinstall vLLM ({originals.reinstall()}) or run "
                "`apply --accept-modified` to take the current bytes as the original"
            )
            return FilePlan(path, target.name, State.MODIFIED, reason, current, installed=installed, refusal=refusal)
    reason = verdict.reason + _original_note(installed, originals, "")
    if manifested is not None:
        reason += " (the manifest is stale: this is not the file apply wrote; reinstalled?)"
    return FilePlan(path, target.name, verdict.state, reason, current, current, _text(verdict), installed)


def _accepted(manifested: FileRecord) -> Optional[Comparison]:
    if not manifested.accepted_modified:
        return None
    return Comparison(Check.ACCEPTED, "differed from RECORD, taken as the original (--accept-modified)")


def _original_note(installed: Comparison, originals: Originals, subject: str) -> str:
    """What a file's reason says about its original (``subject``: the file itself, or its backup)."""
    if installed.check is Check.MODIFIED:
        return f"; {subject}modified since install: {originals.differs}"
    if installed.check is Check.ACCEPTED:
        return f"; {subject}modified since install, accepted with --accept-modified ({originals.differs})"
    return ""


Examine = Callable[[Target, str, ReadFile, Options], Verdict]
"""How a plan asks a target about a file: ``_examine``, or ``StateCache.examine`` for states alone."""


def _examine(target: Target, source: str, read: ReadFile, options: Options) -> Verdict:
    return target.examine(source, read, options)


def _decoded(examine: Examine, target: Target, data: bytes, read: ReadFile, options: Options) -> Verdict:
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        return Verdict(State.UNSUPPORTED, "not UTF-8 text")
    return examine(target, source, read, options)


def _text(verdict: Verdict) -> Optional[bytes]:
    """The patched text (None: there is none, or only the state was asked for)."""
    return verdict.patched.encode("utf-8") if verdict.patched is not None else None


def reader(package_dir: Path) -> ReadFile:
    @lru_cache(maxsize=None)
    def read(relative: str) -> Optional[str]:
        try:
            return (package_dir / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    return read


_PRECEDENCE = (State.UNSUPPORTED, State.MODIFIED, State.UNPATCHED, State.PATCHED, State.NATIVE)


def overall_state(files: tuple[FilePlan, ...]) -> tuple[State, str]:
    """The installation is as far along as its least-finished file.

    Native files count as done: a release that needs only part of the patch is
    ``patched`` once that part is applied, and ``native`` when it needs none of it.
    An optional file (a model family's) that cannot be patched is left out, and named in
    the reason: with many families, one odd file must not block every other model.
    """
    left_alone = [f for f in files if f.optional and f.state is State.UNSUPPORTED]
    counted = [f for f in files if f not in left_alone] or list(files)
    state, reason = _least_finished(counted)
    if left_alone and state is not State.UNSUPPORTED:
        reason += "; left alone (unsupported): " + ", ".join(f.path for f in left_alone)
    return state, reason


def deepseek_native(files: Iterable[FilePlan]) -> bool:
    """Whether the release's DeepSeek-V2/V3 model has EAGLE-3 itself (0.18.0+), whatever the families' files say."""
    return any(f.path == DEEPSEEK_V2.path and f.state is State.NATIVE for f in files)


def _least_finished(files: list[FilePlan]) -> tuple[State, str]:
    for state in _PRECEDENCE:
        matching = [f for f in files if f.state is state]
        if not matching:
            continue
        if state in (State.UNSUPPORTED, State.MODIFIED):
            return state, f"{matching[0].path}: {matching[0].reason}"
        native = "this vLLM supports EAGLE-3 for DeepSeek-V2/V3 itself"
        if state is State.NATIVE:
            return state, native
        if deepseek_native(files):  # 0.18.0+: only the other families' files have work
            done = f"applied by vllm-eagle3-patch {__version__}" if state is State.PATCHED else "can be applied"
            return state, f"{native}; EAGLE-3 for the other model families {done}"
        if state is State.UNPATCHED:
            return state, "EAGLE-3 for DeepSeek-V2/V3 can be applied"
        return state, f"EAGLE-3 for DeepSeek-V2/V3 applied by vllm-eagle3-patch {__version__}"
    raise ToolError("no target files")
