"""Remember what ``status`` found in a file it has judged before.

On an unpatched tree ``status`` must run the codemods to tell "patchable" from
"unsupported", and importing LibCST and parsing cost about half a second: more than a
health check should.  The answer depends only on the file's bytes, the files its patch
target read beside it, the options and this tool's own code (LibCST's included), so it is
kept under the user's cache directory keyed by all of them; a later ``status`` answers from
hashes without importing LibCST.  Only states and reasons are kept: ``diff`` and ``apply``
always run the codemods, so nothing read from this cache ever reaches a vLLM file.

The directory is ``$VLLM_EAGLE3_PATCH_VERDICT_CACHE`` (empty: no cache), else
``$XDG_CACHE_HOME/vllm-eagle3-patch/states`` or ``~/.cache/vllm-eagle3-patch/states``.
A cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
from functools import cache
from pathlib import Path
from typing import Callable, Optional, TypeVar

from . import patches
from .codemod.patch import Options, Patch, State, Verdict
from .eagle3.python_layout import Layouts
from .eagle3.release import ReadFile, Release
from .eagle3.tree import Held
from .install.fileio import write_atomically

ENVIRONMENT_VARIABLE = "VLLM_EAGLE3_PATCH_VERDICT_CACHE"
T = TypeVar("T")


def default_directory() -> Optional[Path]:
    if ENVIRONMENT_VARIABLE in os.environ:
        return Path(os.environ[ENVIRONMENT_VARIABLE]) if os.environ[ENVIRONMENT_VARIABLE] else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm-eagle3-patch" / "states"


@cache
def tool_fingerprint() -> str:
    """A hash of every source file that decides a verdict: this package (the catalog and its
    codemods included), LibCST's version."""
    package = Path(__file__).parent
    sources = [*package.rglob("*.py"), *Path(patches.__path__[0]).glob("*.py")]
    digest = hashlib.sha256()
    libcst = importlib.machinery.PathFinder.find_spec("libcst")  # not find_spec: LibCST stays unimported
    if libcst is not None and libcst.origin is not None:
        sources.append(Path(libcst.origin).parent / "_version.py")
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()


class StateCache:
    """Verdicts (state and reason) by the hash of everything they depend on."""

    def __init__(self, directory: Optional[Path], fingerprint: Callable[[], str] = tool_fingerprint) -> None:
        self.directory = directory
        self._fingerprint = fingerprint

    def examine(self, patch: Patch, source: str, release: Release, options: Options) -> Verdict:
        """``patch.examine`` without its patched text, from the cache when the inputs are the same."""
        if self.directory is None:
            return _state_only(patch.examine(source, release, options))
        path = self.directory / f"{self._key(patch, source, options)}.json"
        cached = _load(path, release)
        if cached is not None:
            return cached
        reads: dict[str, Optional[str]] = {}
        found: dict[str, Optional[str]] = {}
        verdict = patch.examine(source, _recorded(release, reads, found), options)
        _keep(path, {"state": verdict.state.value, "reason": verdict.reason, "reads": reads, "found": found})
        return _state_only(verdict)

    def remember(
        self,
        name: str,
        release: Release,
        compute: Callable[[Release], T],
        encode: Callable[[T], object],
        decode: Callable[[object], T],
    ) -> T:
        """``compute(release)``, or what it returned before on a tree whose files it read are the same.

        For what every command needs and only reads (the families found in the registry): the answer is
        kept with the hash of each file ``compute`` read, and reused while every one still matches.
        """
        if self.directory is None:
            return compute(release)
        path = self._remembered(name)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if _still_true(entry, release):
                return decode(entry["value"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        reads: dict[str, Optional[str]] = {}
        found: dict[str, Optional[str]] = {}
        value = compute(_recorded(release, reads, found))
        _keep(path, {"reads": reads, "found": found, "value": encode(value)})
        return value

    def knows(self, name: str) -> bool:
        """Whether :meth:`remember` kept an answer for ``name`` (still true or not)."""
        return self.directory is not None and self._remembered(name).is_file()

    def _remembered(self, name: str) -> Path:
        digest = hashlib.sha256(json.dumps([self._fingerprint(), name]).encode()).hexdigest()
        return (self.directory or Path()) / f"{digest}.json"

    def _key(self, patch: Patch, source: str, options: Options) -> str:
        parts = [self._fingerprint(), type(patch).__module__, patch.cache_key, options.aux_layers, _digest(source)]
        return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()


def _load(path: Path, release: Release) -> Optional[Verdict]:
    """The cached verdict, if there is one and every file it read and every search it made are as they were."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not _still_true(entry, release):
            return None
        return Verdict(State(entry["state"]), str(entry["reason"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _still_true(entry: dict, release: Release) -> bool:
    """Whether every file ``entry`` read has the same contents and every search it made finds the same files
    (a file added, removed or renamed changes what a search finds, and so the answer)."""
    if any(_digest(release.read(relative)) != digest for relative, digest in entry["reads"].items()):
        return False
    return all(_found_digest(release.tree.search(literal)) == digest for literal, digest in entry["found"].items())


def _recorded(release: Release, reads: dict[str, Optional[str]], found: dict[str, Optional[str]]) -> Release:
    """A view of ``release`` that notes the digest of every file read and of every search's answer."""

    def searched(literal: str, files: tuple[str, ...]) -> None:
        found[literal] = _found_digest(files)

    return release.reading_through(_recording(release.read, reads), searched)


def _found_digest(files: tuple[str, ...]) -> Optional[str]:
    return _digest("\n".join(files))


def _state_only(verdict: Verdict) -> Verdict:
    return Verdict(verdict.state, verdict.reason)


def _recording(read: ReadFile, reads: dict[str, Optional[str]]) -> ReadFile:
    def recorded(relative: str) -> Optional[str]:
        text = read(relative)
        reads[relative] = _digest(text)
        return text

    return recorded


def _keep(path: Path, entry: object) -> None:
    """``entry`` written to ``path`` as JSON, whole or not at all, without waiting for the disk: what a crash
    loses is only asked again.  A read-only or full cache directory: no cache, the same answers."""
    try:
        write_atomically(path, json.dumps(entry, separators=(",", ":")).encode("utf-8"), concurrent=True, durable=False)
    except OSError:
        pass


def _digest(text: Optional[str]) -> Optional[str]:
    return None if text is None else hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ScanFile:
    """What each file of one tree held of the literals searched (``tree.ScanMemo``), kept in the cache directory
    by the tree's path and this tool's code: every command searches the whole tree (some 3,600 files on 0.34.0),
    and a later one reads only the files whose identity changed since, not all of them."""

    def __init__(self, directory: Optional[Path], package_dir: Path, fingerprint: Callable[[], str] = tool_fingerprint):
        self._fingerprint = fingerprint
        name = hashlib.sha256(str(package_dir.resolve()).encode("utf-8", "surrogatepass")).hexdigest()
        self.path = directory / f"scan-{name}.json" if directory is not None else None

    def recall(self) -> tuple[frozenset[str], Held]:
        try:
            assert self.path is not None
            entry = json.loads(self.path.read_text(encoding="utf-8"))
            if entry["tool"] != self._fingerprint():
                return frozenset(), {}
            literals = entry["literals"]
            held = {
                relative: (tuple(identity), frozenset(literals[i] for i in found))
                for relative, (identity, found) in entry["files"].items()
            }
            return frozenset(literals), held
        except (AssertionError, OSError, ValueError, KeyError, TypeError, IndexError):
            return frozenset(), {}

    def keep(self, literals: frozenset[str], held: Held) -> None:
        if self.path is None:
            return
        order = sorted(literals)
        index = {literal: i for i, literal in enumerate(order)}
        files = {relative: (identity, sorted(index[h] for h in has)) for relative, (identity, has) in held.items()}
        _keep(self.path, {"tool": self._fingerprint(), "literals": order, "files": files})


class LayoutFile:
    """Where the statements of each file of one release lie (``python_layout.Layouts``), by the digest of the
    file's text, kept in the cache directory by the release and this tool's code: discovery parses every model
    file and lays it out on the way, and where a later command takes discovery's answer from the cache, its
    judges would otherwise parse each file they judge once more only to lay it out."""

    def __init__(self, directory: Optional[Path], version: str, fingerprint: Callable[[], str] = tool_fingerprint):
        self._fingerprint = fingerprint
        self._version = version
        self._directory = directory

    @property
    def path(self) -> Optional[Path]:
        if self._directory is None:
            return None
        key = json.dumps(["layouts", self._fingerprint(), self._version]).encode()
        return self._directory / f"layouts-{hashlib.sha256(key).hexdigest()}.json"

    def load(self) -> dict[str, list]:
        try:
            assert self.path is not None
            layouts = json.loads(self.path.read_text(encoding="utf-8"))
            return layouts if isinstance(layouts, dict) else {}
        except (AssertionError, OSError, ValueError):
            return {}

    def keep(self, layouts: Layouts) -> None:
        path, kept = self.path, layouts.to_keep()
        if path is None or kept is None:
            return
        _keep(path, kept)
