"""Carry out a plan (``apply``) or undo it (``revert``): all files or none.

Order of operations, so that no moment leaves vLLM half-patched beyond repair:
backups first, then the manifest naming both hashes of every file, then each file
replaced atomically.  A failure rolls back the files already written.
"""

from __future__ import annotations

import fcntl
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from . import __version__
from .errors import ToolError
from .fileio import drop_bytecode, write_atomically
from .manifest import FileRecord, Manifest, StateDir, sha256
from .plan import Plan
from .target import State

LOCK_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Outcome:
    """What a command did, for the user and for ``--json``."""

    message: str
    files: tuple[str, ...] = ()


@contextmanager
def locked(state_dir: StateDir) -> Iterator[None]:
    """One ``apply``/``revert`` at a time per vLLM package; a second waits briefly, then refuses."""
    state_dir.path.mkdir(parents=True, exist_ok=True)
    lock_path = state_dir.path / "lock"
    with open(lock_path, "a+b") as handle:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ToolError(f"{lock_path}: another vllm-eagle3-patch is working on this vLLM") from None
                time.sleep(0.1)
        yield


def apply(plan: Plan) -> Outcome:
    if plan.state is State.UNSUPPORTED:
        raise ToolError(f"{plan.install.package_dir / _first(plan, State.UNSUPPORTED)}; nothing was changed")
    if plan.state is State.MODIFIED:
        path = _first(plan, State.MODIFIED)
        raise ToolError(f"{plan.install.package_dir / path}; run `revert --force` first. Nothing was changed")
    changes = plan.changes
    if not changes:
        if plan.state is State.NATIVE:
            return Outcome(f"vLLM {plan.install.version} supports EAGLE-3 for DeepSeek natively; nothing to do")
        return Outcome(f"vLLM {plan.install.version} is already patched; nothing to do")
    state_dir = StateDir(plan.install.package_dir)
    with locked(state_dir):
        previous = plan.manifest
        records = dict(previous.files) if previous else {}
        for change in changes:
            assert change.original is not None and change.desired is not None
            if change.path not in records or records[change.path].sha256_before != sha256(change.original):
                state_dir.save_backup(change.path, change.original)
            records[change.path] = FileRecord(sha256(change.original), sha256(change.desired))
        state_dir.save(
            Manifest(
                tool_version=__version__,
                vllm_version=plan.install.version,
                aux_layers=plan.options.aux_layers,
                files=records,
            )
        )
        _replace_all(
            plan.install.package_dir,
            [(c.path, c.desired, c.current) for c in changes],  # type: ignore[misc]
            on_failure=lambda: _restore_manifest(state_dir, previous),
        )
    names = tuple(c.path for c in changes)
    return Outcome(f"patched {len(names)} file(s) of vLLM {plan.install.version}", names)


def revert(plan: Plan, force: bool = False) -> Outcome:
    manifest = plan.manifest
    if manifest is None:
        return Outcome("nothing to revert: no vllm-eagle3-patch manifest in this vLLM")
    state_dir = StateDir(plan.install.package_dir)
    package_dir = plan.install.package_dir
    with locked(state_dir):
        restores = []
        for path, record in manifest.files.items():
            target = package_dir / path
            current = target.read_bytes() if target.exists() else b""
            digest = sha256(current)
            if digest == record.sha256_before:
                continue
            if digest != record.sha256_after and not force:
                raise ToolError(f"{target}: changed since apply; not reverting (use --force to restore the original)")
            restores.append((path, state_dir.read_backup(path, record), current))
        _replace_all(package_dir, restores, on_failure=lambda: None)
        shutil.rmtree(state_dir.path)
    names = tuple(path for path, _, _ in restores)
    return Outcome(f"restored {len(names)} original file(s) of vLLM {plan.install.version}", names)


def _replace_all(package_dir: Path, writes: list[tuple[str, bytes, bytes]], on_failure) -> None:
    """Write every ``(path, new, old)``; if one fails, put back the ones already written."""
    done: list[tuple[str, bytes]] = []
    try:
        for path, new, old in writes:
            write_atomically(package_dir / path, new)
            drop_bytecode(package_dir / path)
            done.append((path, old))
    except OSError as error:
        for path, old in reversed(done):
            write_atomically(package_dir / path, old)
            drop_bytecode(package_dir / path)
        on_failure()
        failed = package_dir / writes[len(done)][0]
        raise ToolError(f"{failed}: cannot write ({error.strerror or error}); every file was rolled back") from None


def _restore_manifest(state_dir: StateDir, previous: Optional[Manifest]) -> None:
    if previous is None:
        shutil.rmtree(state_dir.path, ignore_errors=True)
    else:
        state_dir.save(previous)


def _first(plan: Plan, state: State) -> str:
    found = next(f for f in plan.files if f.state is state)
    return f"{found.path}: {found.reason}"
