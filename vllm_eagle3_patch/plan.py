"""The plan: for every target file, what it is now, what it was, and what ``apply`` would write.

``status``, ``diff`` and ``apply`` all read the same plan; only what they do with it differs.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional, Union

from . import __version__
from .errors import ToolError
from .locate import VllmInstall
from .manifest import FileRecord, Manifest, StateDir, sha256
from .target import Options, ReadFile, State, Target


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


def make_plan(install: VllmInstall, options: Optional[Options] = None, *, states_only: bool = False) -> Plan:
    """Look at every target file of ``install``.

    ``options`` None means "as recorded": a later ``apply`` keeps the choices (layer ids)
    of the earlier one unless the user gives new ones.  ``states_only`` (``status``) skips
    writing out the patched texts, a third of the work: its files have no ``desired`` text.
    """
    state_dir = StateDir(install.package_dir)
    manifest = state_dir.load()
    recorded = Options(aux_layers=manifest.aux_layers if manifest else None)
    if options is None or options.aux_layers is None:
        options = recorded
    files: list[Union[FilePlan, _Found]] = []
    for target in load_targets():
        path = target.locate(install.package_dir)
        if path is None:
            if target.required:
                files.append(FilePlan(target.default_path, target.name, State.UNSUPPORTED, "file not found", b""))
            continue
        record = manifest.files.get(path) if manifest else None
        files.append(_find(target, path, state_dir, record, options != recorded))
    if not files:
        raise ToolError(f"{install.package_dir}: none of the files this tool patches is there")
    to_examine = [f for f in files if isinstance(f, _Found) and f.examine is not None]
    jobs = [(f.target, f.examine) for f in to_examine]
    verdicts = examine_all(jobs, install.package_dir, options, with_text=not states_only)  # type: ignore[arg-type]
    verdict_of = {id(f): verdict for f, verdict in zip(to_examine, verdicts)}
    planned = tuple(_plan_file(f, verdict_of.get(id(f))) if isinstance(f, _Found) else f for f in files)
    return Plan(install, planned, manifest, options)


@dataclass(frozen=True)
class _Found:
    """A target file as read, before any codemod ran: what it is now, and what to examine."""

    target: Target
    path: str
    current: bytes
    record: Optional[FileRecord]
    original: Optional[bytes]
    """The original bytes from the backup, when the file is what ``apply`` wrote."""
    examine: Optional[bytes]
    """What the codemod must look at (None: the hashes already tell everything)."""


def _find(target: Target, path: str, state_dir: StateDir, record: Optional[FileRecord], new_options: bool) -> _Found:
    current = (state_dir.package_dir / path).read_bytes()
    if record is not None and sha256(current) == record.sha256_after:
        original = state_dir.read_backup(path, record)
        # Re-run the codemod only when the options changed: status stays a hash check.
        return _Found(target, path, current, record, original, original if new_options else None)
    return _Found(target, path, current, record, None, current)


@dataclass(frozen=True)
class Examined:
    """A verdict as it comes back from a worker: with the patched text, not the tree."""

    state: State
    reason: str
    patched: Optional[bytes] = None


def _plan_file(found: _Found, verdict: Optional[Examined]) -> FilePlan:
    path, name, current, record = found.path, found.target.name, found.current, found.record
    if found.original is not None:
        desired = current if verdict is None else verdict.patched
        return FilePlan(path, name, State.PATCHED, "applied by vllm-eagle3-patch", current, found.original, desired)
    assert verdict is not None
    if verdict.state is State.PATCHED:
        if record is not None:
            return FilePlan(path, name, State.MODIFIED, "changed since vllm-eagle3-patch applied it", current)
        return FilePlan(path, name, State.PATCHED, "patched, but no manifest records it: revert cannot restore it", current)
    reason = verdict.reason
    if record is not None:
        reason += " (the manifest is stale: this is not the file apply wrote; reinstalled?)"
    return FilePlan(path, name, verdict.state, reason, current, current, verdict.patched)


def examine_all(
    jobs: list[tuple[Target, bytes]], package_dir: Path, options: Options, with_text: bool = True
) -> list[Examined]:
    """Every ``(target, file bytes)`` examined, on all cores.

    Parsing and transforming are nearly all of a plan's time, and each file stands
    alone, so the files go to forked workers, the largest first, which already hold LibCST.
    """
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2:
        return [_examine(target, data, package_dir, options, with_text) for target, data in jobs]
    import multiprocessing  # here: a plan that only compares hashes never needs them
    from concurrent.futures import ProcessPoolExecutor

    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][1]))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {i: pool.submit(_examine, *jobs[i], package_dir, options, with_text) for i in order}
        return [futures[i].result() for i in range(len(jobs))]


def _examine(target: Target, data: bytes, package_dir: Path, options: Options, with_text: bool) -> Examined:
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        return Examined(State.UNSUPPORTED, "not UTF-8 text")
    verdict = target.examine(source, _reader(package_dir), options)
    return Examined(verdict.state, verdict.reason, _encode(verdict.patched) if with_text else None)


def _encode(text: Optional[str]) -> Optional[bytes]:
    return text.encode("utf-8") if text is not None else None


def _reader(package_dir: Path) -> ReadFile:
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
    """
    for state in _PRECEDENCE:
        matching = [f for f in files if f.state is state]
        if not matching:
            continue
        if state in (State.UNSUPPORTED, State.MODIFIED):
            return state, f"{matching[0].path}: {matching[0].reason}"
        if state is State.UNPATCHED:
            return state, "EAGLE-3 for DeepSeek-V2/V3 can be applied"
        if state is State.PATCHED:
            return state, f"EAGLE-3 for DeepSeek-V2/V3 applied by vllm-eagle3-patch {__version__}"
        return state, "this vLLM supports EAGLE-3 for DeepSeek-V2/V3 itself"
    raise ToolError("no target files")
