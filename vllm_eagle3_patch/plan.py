"""The plan: for every file to patch, what it is now, what it was, and what ``apply`` would write.

``status``, ``diff`` and ``apply`` all read the same plan; only what they do with it differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Iterable, Optional

from .catalog import FAMILIES, planned_patches
from .codemod.cst_tools import import_libcst_now
from .codemod.patch import Options, Patch, Policy, State, Verdict
from .codemod.two_processes import judge_all, on_two_processes
from .discovery import Discovery, decoder, discover, encode, serving
from .eagle3.class_chain import ChainReader
from .eagle3.python_layout import Layouts
from .eagle3.release import Release
from .errors import ToolError
from .install.journal import Interruption
from .install.locate import VllmInstall
from .install.manifest import FileRecord, Manifest, StateDir, sha256
from .install.record import Comparison, RecordCheck, compare_original
from .patch_kinds import Found
from .plan_facts import Families, FileFact, FileReason, Standing
from .verdict_cache import LayoutFile, ScanFile, StateCache, default_directory


@dataclass(frozen=True)
class FilePlan:
    """One file to patch.  ``desired`` is the full text ``apply`` would leave (None: leave it)."""

    path: str
    """Relative to the ``vllm`` package directory."""
    patch: str
    state: State
    fact: FileFact
    """What the plan found the file to be: the kind of its reason (``render/plan_words.py`` says it)."""
    current: bytes
    original: Optional[bytes] = None
    desired: Optional[bytes] = None
    installed: Optional[Comparison] = None
    """How ``original`` compares with vLLM's RECORD (None: there is no original to keep)."""
    optional: bool = False
    """An unsupported optional file (a model family's) is left alone and does not block the others."""
    family: Optional[str] = None
    """The model family the file serves (None: every family, as the gate does)."""
    stale: bool = False
    """The manifest names this file but it holds other bytes than apply wrote (vLLM reinstalled?)."""
    verdict_reason: str = ""
    """The codemod's reason, where its verdict stands (``FileFact.JUDGED``)."""
    short: tuple[str, ...] = ()
    """The model types a patched file (the gate) still refuses: the next ``apply`` completes it."""
    vllm_version: str = ""
    """The installed vLLM's version, which the reason names where the file differs from its RECORD."""

    @property
    def because(self) -> FileReason:
        """Why the file is in its state, as facts (``render/plan_words.file_reason`` words them)."""
        return FileReason(self.fact, self.verdict_reason, self.installed, self.vllm_version, self.short)

    @property
    def changes(self) -> bool:
        return self.desired is not None and self.desired != self.current


@dataclass(frozen=True)
class Plan:
    install: VllmInstall
    files: tuple[FilePlan, ...]
    manifest: Optional[Manifest]
    options: Options
    release: Release
    """The tree's files and what they say, read once: for the codemods, ``verify`` and ``doctor``."""
    discovery: Discovery = Discovery(())
    """The families found by rule in this release's registry."""
    unreadable_state: Optional[str] = None
    """Why the manifest could not be read (``status`` as another user than the one who applied)."""
    interruption: Optional[Interruption] = None
    """An ``apply`` or ``revert`` that stopped part-way, or is at work in another process."""

    @cached_property
    def chains(self) -> ChainReader:
        """The model files' class chains as this plan found the tree, each file parsed once for every judge that
        asks (``status --model`` of many architectures reads the same files again and again)."""
        return ChainReader(self.release.read, self.release.layouts)

    @property
    def state(self) -> State:
        """The installation's state: ``interrupted`` while a run is unfinished, ``unknown`` where this tool cannot
        tell the release's EAGLE-3 interface, else its files'."""
        if self.interruption:
            return State.INTERRUPTED
        return State.UNKNOWN if self.release.unknown is not None else self.files_state

    @property
    def files_state(self) -> State:
        """The state of the least-finished file: what ``apply`` judges."""
        return overall_state(self.files).state

    @property
    def standing(self) -> Standing:
        """How far along the files are, as facts."""
        return overall_state(self.files)

    @property
    def stale_for(self) -> Optional[str]:
        """The vLLM version the manifest was written for, where it is another than the installed one."""
        manifest = self.manifest
        return manifest.vllm_version if manifest and manifest.vllm_version != self.install.version else None

    @property
    def stale_files(self) -> int:
        """How many files hold other bytes than ``apply`` wrote, though the manifest names them."""
        return sum(f.stale for f in self.files)

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
        state_dir = StateDir(package_dir)
        return state_dir.load() == self.manifest and state_dir.load_journal() == (
            self.interruption.journal if self.interruption else None
        )


def make_plan(
    install: VllmInstall,
    options: Optional[Options] = None,
    *,
    states_only: bool = False,
    accept_modified: bool = False,
    only: Optional[tuple[str, ...]] = None,
) -> Plan:
    """Look at every file to patch of ``install``.

    ``options`` None means "as recorded": a later ``apply`` keeps the choices (layer ids)
    of the earlier one unless the user gives new ones (``Options()`` is the default ids).
    ``states_only`` (``status``) skips writing out the patched texts: its files have no ``desired``
    text.  ``accept_modified`` takes files that differ from vLLM's RECORD for originals all the same.
    The patches are those of the catalog's entries (``catalog.PATCHES``: the families' files and those
    found by rule in the release's own registry, ``discovery.py``), the entries planned after the model files
    handed their verdicts; ``only`` (architecture names, ``apply --only``) keeps the model files serving
    those architectures, the files an earlier ``apply`` patched, the proposer and the gate.
    """
    state_dir = StateDir(install.package_dir)
    manifest, unreadable = state_dir.load_for_reading() if states_only else (state_dir.load(), None)
    recorded = _recorded_options(manifest)
    if options is None:
        options = recorded
    layouts = LayoutFile(default_directory(), install.version)
    release = Release(
        install.package_dir, layouts=Layouts(layouts.load), memo=ScanFile(default_directory(), install.package_dir)
    )
    found_by_rule = f"families found by rule in vLLM {install.version}"  # any tree of the release: files checked
    if not states_only and StateCache(default_directory()).knows(found_by_rule):
        # the judges need LibCST: imported here while a child searches the tree (else while discovery parses)
        (searched,) = on_two_processes([release.tree.search_all], meanwhile=import_libcst_now, few=1)
        release.tree.take_searches(searched)
    discovery = StateCache(default_directory()).remember(
        found_by_rule,
        _as_installed(release, state_dir, manifest),
        lambda tree: discover(tree, FAMILIES, meanwhile=lambda: _while_discovery_parses(release)),
        encode,
        decoder(FAMILIES),
    )
    if release.unknown is not None and not states_only:  # diff and apply: nothing is planned on a guess
        raise ToolError(f"{install.package_dir}: {release.no_eagle3}; nothing was changed")
    found = Found(discovery, only, release, _before_apply(state_dir, manifest))
    wanted = None if only is None else serving(release, only, (*FAMILIES, *discovery.families), discovery)
    patches = _asked_for(planned_patches(found, after_model_files=False), wanted, release, manifest)
    context = FileContext(
        release,
        state_dir,
        options,
        recorded,
        Originals(install, accept_modified),
        JudgedAhead() if states_only else judge_ahead(release, options, manifest, patches, layouts.keep),
        StateCache(default_directory()) if states_only else None,
        unreadable,
    )
    files = _plan_patches(context, manifest, patches)
    eagle3 = frozenset(f.family for f in files if f.family and f.state in (State.UNPATCHED, State.PATCHED))
    later = _asked_for(
        planned_patches(replace(found, eagle3=eagle3), after_model_files=True), wanted, release, manifest
    )
    files += _plan_patches(context, manifest, later)
    if states_only:  # apply and diff keep them while their judges work
        layouts.keep(release.layouts)
    if not files:
        raise ToolError(f"{install.package_dir}: none of the files this tool patches is there")
    files.sort(key=lambda file: file.path)
    return Plan(install, tuple(files), manifest, options, release, discovery, unreadable, state_dir.interruption())


def _while_discovery_parses(release: Release) -> None:
    """What the plan needs next and discovery's second process cannot do for it: the search of the tree for
    the release's interface (a pass over its files' bytes), and LibCST, imported before the judges fork, so that
    they share one import."""
    release.unknown  # noqa: B018 - read for its side effect: the search, done and kept
    import_libcst_now()


def _as_installed(release: Release, state_dir: StateDir, manifest: Optional[Manifest]) -> Release:
    """The tree as vLLM installed it: the backups of the files an earlier ``apply`` patched.  The families
    found are the same on a patched tree, and the cache keeps them across ``apply`` and ``revert``."""
    patched = set(manifest.files) if manifest else set()

    def read(relative: str) -> Optional[str]:
        if relative in patched:
            try:
                return state_dir.backup_path(relative).read_text(encoding="utf-8", errors="replace")
            except OSError:
                pass  # a lost backup: the file itself, whose marked lines the class chain ignores
        return release.read(relative)

    return release.reading_through(read) if patched else release


def _before_apply(state_dir: StateDir, manifest: Optional[Manifest]) -> Callable[[str], Optional[str]]:
    """Reads a file as it was before an earlier ``apply`` patched it (its backup); None where none did."""

    def read(relative: str) -> Optional[str]:
        record = manifest.files.get(relative) if manifest else None
        return None if record is None else state_dir.read_backup(relative, record).decode("utf-8", "replace")

    return read


def _asked_for(
    patches: tuple[Patch, ...], wanted: Optional[set[str]], release: Release, manifest: Optional[Manifest]
) -> tuple[Patch, ...]:
    """With ``--only`` (``wanted``: the families serving its architectures): the patches serving them, those
    an earlier ``apply`` patched, and those serving every family (the proposer, the gate)."""
    if wanted is None:
        return patches
    applied = set(manifest.files) if manifest else set()
    return tuple(
        t for t in patches if not t.serves_families or wanted & set(t.serves_families) or t.locate(release) in applied
    )


def _plan_patches(context: FileContext, manifest: Optional[Manifest], patches: Iterable[Patch]) -> list[FilePlan]:
    files = []
    for patch in patches:
        path = patch.locate(context.release)
        if path is None:
            if patch.policy is Policy.REQUIRED:
                files.append(FilePlan(patch.default_path, patch.name, State.UNSUPPORTED, FileFact.NOT_FOUND, b""))
            continue
        manifested = manifest.files.get(path) if manifest else None
        planned = _falling_short(patch, _plan_file(context, patch, path, manifested))
        optional = patch.policy is Policy.OPTIONAL
        files.append(replace(planned, optional=optional, family=patch.serves, vllm_version=context.version))
    return files


def _recorded_options(manifest: Optional[Manifest]) -> Options:
    """The ids of the last ``apply``, as its manifest names them."""
    if manifest is None or manifest.aux_layers is None:
        return Options()
    return Options(
        manifest.aux_layers, source="kept from the last apply; `--aux-layers default` returns to the default"
    )


@dataclass(frozen=True)
class Originals:
    """Judges bytes as a file's original by vLLM's RECORD: what the installer wrote."""

    install: VllmInstall
    accept_modified: bool

    def compare(self, path: str, digest: str, accepted_modified: bool = False) -> Comparison:
        return compare_original(self.install.record, path, digest, accepted_modified)


@dataclass(frozen=True)
class Judged:
    """A file's verdict, judged from ``source`` before the plan asked."""

    source: str
    verdict: Verdict


@dataclass(frozen=True)
class JudgedAhead:
    """The verdicts of the files planned first (the model files, the proposer) that are not yet patched,
    judged ahead on two processes (``codemod/two_processes.py``): writing out their patched texts is most of
    ``apply``'s time.  By file path, with the plan's options; a file asked about with other bytes (a replan
    reads its backup) is judged again."""

    by_path: dict[str, Judged] = field(default_factory=dict)

    def verdict(self, path: str, source: str) -> Optional[Verdict]:
        judged = self.by_path.get(path)
        return judged.verdict if judged is not None and judged.source == source else None


def judge_ahead(
    release: Release,
    options: Options,
    manifest: Optional[Manifest],
    patches: tuple[Patch, ...],
    keep_layouts: Callable[[Layouts], None] = lambda layouts: None,
) -> JudgedAhead:
    """The files of ``patches`` not yet patched (one patch per file), judged with ``options``; the layouts found
    so far are kept (``keep_layouts``) while the second process judges."""
    patched = set(manifest.files) if manifest else set()
    sources: dict[str, tuple[Patch, str]] = {}
    for patch in patches:
        path = patch.locate(release)
        if path is not None and path not in patched:
            try:  # as the plan will read it: the bytes, decoded (no newline translation)
                sources[path] = (patch, (release.package_dir / path).read_bytes().decode("utf-8"))
            except (OSError, UnicodeDecodeError):
                pass
    jobs = [lambda t=t, s=s: t.examine(s, release, options) for t, s in sources.values()]
    verdicts = judge_all(jobs, [len(source) for _, source in sources.values()], lambda: keep_layouts(release.layouts))
    return JudgedAhead(
        {path: Judged(source, verdict) for (path, (_, source)), verdict in zip(sources.items(), verdicts)}
    )


def _text(verdict: Verdict) -> Optional[bytes]:
    """The patched text (None: there is none, or only the state was asked for)."""
    return verdict.patched.encode("utf-8") if verdict.patched is not None else None


@dataclass(frozen=True)
class FileContext:
    """What planning every file shares: the tree, its state, the options, how to ask a patch."""

    release: Release
    state_dir: StateDir
    options: Options
    recorded: Options
    """The options of the last ``apply`` (its manifest's)."""
    originals: Originals
    judged_ahead: JudgedAhead
    state_cache: Optional[StateCache] = None
    """``status``: states alone, from the verdict cache where it can; no patched texts, so nothing is
    replanned (a patched file is a hash check)."""
    unreadable_state: Optional[str] = None

    @property
    def states_only(self) -> bool:
        return self.state_cache is not None

    @property
    def version(self) -> str:
        return self.originals.install.version

    def verdict(self, patch: Patch, path: str, data: bytes) -> Verdict:
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            return Verdict(State.UNSUPPORTED, "not UTF-8 text")
        if self.state_cache is not None:
            return self.state_cache.examine(patch, source, self.release, self.options)
        ahead = self.judged_ahead.verdict(path, source)
        return ahead if ahead is not None else patch.examine(source, self.release, self.options)


def _plan_file(context: FileContext, patch: Patch, path: str, manifested: Optional[FileRecord]) -> FilePlan:
    state_dir, originals = context.state_dir, context.originals
    current = (state_dir.package_dir / path).read_bytes()
    if manifested is not None and sha256(current) == manifested.sha256_after:
        original = state_dir.read_backup(path, manifested)
        # Re-run the codemod only when the options changed (or the patch's own inputs may have: the
        # gate's types follow the files patched with it): status stays a hash check.
        replanned = patch.replanned and not context.states_only
        same = context.options == context.recorded and not replanned
        desired = current if same else _text(context.verdict(patch, path, original))
        installed = originals.compare(path, manifested.sha256_before, manifested.accepted_modified)
        return FilePlan(path, patch.name, State.PATCHED, FileFact.APPLIED, current, original, desired, installed)
    verdict = context.verdict(patch, path, current)
    if verdict.state is State.PATCHED:
        if manifested is not None:
            return FilePlan(path, patch.name, State.MODIFIED, FileFact.CHANGED_SINCE_APPLY, current)
        unrecorded = FileFact.UNREADABLE_MANIFEST if context.unreadable_state else FileFact.UNRECORDED
        return FilePlan(path, patch.name, State.PATCHED, unrecorded, current)
    installed = originals.compare(path, sha256(current))
    if installed.check is RecordCheck.MODIFIED:
        if manifested is not None and originals.compare(path, manifested.sha256_before).check is RecordCheck.MATCHES:
            # Edited after apply, marks and all: the backup is vLLM's original, these bytes never replace it.
            return FilePlan(path, patch.name, State.MODIFIED, FileFact.MARKS_GONE, current, installed=installed)
        if originals.accept_modified:
            installed = originals.compare(path, sha256(current), accepted_modified=True)
        elif verdict.state is State.UNPATCHED:
            modified = FileFact.MODIFIED_SINCE_INSTALL
            return FilePlan(path, patch.name, State.MODIFIED, modified, current, installed=installed)
    stale = manifested is not None  # the manifest names the file, but these are not the bytes apply wrote
    judged = FilePlan(path, patch.name, verdict.state, FileFact.JUDGED, current, current, _text(verdict), installed)
    return replace(judged, stale=stale, verdict_reason=verdict.reason)


def _falling_short(patch: Patch, file: FilePlan) -> FilePlan:
    """A file patched for less than the patch adds now (a gate missing model types) is not ``patched``:
    the next ``apply`` (which plans it from its original) completes it."""
    if file.state is not State.PATCHED:
        return file
    short = patch.falls_short(file.current.decode("utf-8", "replace"))
    if not short:
        return file
    return replace(file, state=State.UNPATCHED, short=tuple(short))


_PRECEDENCE = (State.UNSUPPORTED, State.MODIFIED, State.UNPATCHED, State.PATCHED, State.NATIVE)
"""The files' states, least finished first: a set of files is as far along as the first of these it holds."""


def least_finished(states: Iterable[State]) -> Optional[State]:
    """The least finished of ``states`` (native counts as done), None where there are none."""
    held = set(states)
    return next((state for state in _PRECEDENCE if state in held), None)


def overall_state(files: tuple[FilePlan, ...]) -> Standing:
    """The installation is as far along as its least-finished file.

    Native files count as done: a release that needs only part of the patch is
    ``patched`` once that part is applied, and ``native`` when it needs none of it.
    An optional file (a model family's) that cannot be patched is left out, and named in
    the reason: with many families, one odd file must not block every other model.
    """
    left_alone = [f for f in files if f.optional and f.state is State.UNSUPPORTED]
    counted = [f for f in files if f not in left_alone] or list(files)
    catalogued = {family.name for family in FAMILIES}
    left_alone.sort(key=lambda f: f.family not in catalogued)  # the catalog's families first, then the rule's
    return replace(_least_finished(counted), left_alone=tuple(f.path for f in left_alone))


def _least_finished(files: list[FilePlan]) -> Standing:
    state = least_finished(f.state for f in files)
    if state is None:
        raise ToolError("no target files")
    matching = [f for f in files if f.state is state]
    if state in (State.UNSUPPORTED, State.MODIFIED):
        first = min(matching, key=telling_first)
        return Standing(state, blocking=(first.path, first.because))
    if state is State.NATIVE:
        return Standing(state, native=_families(matching))
    eagle3 = _families(f for f in files if f.state in (State.UNPATCHED, State.PATCHED))
    return Standing(state, eagle3=eagle3, native=_families(f for f in files if f.state is State.NATIVE and f.family))


def telling_first(file: FilePlan) -> tuple[bool, bool]:
    """The order in which to name a blocking file: one that blocks before one left alone, a model's
    file (DeepSeek's, the tool's first purpose) before the gate or the proposer."""
    return file.optional, file.family is None


def _families(files: Iterable[FilePlan]) -> Families:
    """The model families the files serve, in the catalog's order (the gate and proposer serve them
    all), and how many more architectures' files the rule found (``status --architectures`` names them)."""
    names = {f.family for f in files if f.family}
    listed = tuple(family.name for family in FAMILIES if family.name in names)
    return Families(listed, len(names) - len(listed))
