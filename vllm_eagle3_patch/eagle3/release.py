"""What an installed vLLM release's EAGLE-3 interface looks like, read from its own files (never imported).

The one home of every name and place this tool knows about vLLM's side of EAGLE-3: the
protocol, the getter names the runner calls, the runner, the gate, the drafter loading, the
registry.  A :class:`Release` reads a vLLM tree once (through one cached reader) and is handed
to the codemods, ``verify`` and ``doctor``; reading the release's own files keeps the answers
true for releases this tool has never seen, where a version table would have to be guessed.
The runner's contract comes in three shapes, told apart by structure, never by version: the two
methods called by name, the same behind ``SupportsEagle3``, and ``SupportsEagle3`` built on
``EagleModelMixin`` with the getter under another name (``docs/releases.md`` has them per release).
"""

from __future__ import annotations

import ast
import bisect
import enum
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .modules import MODELS, MODELS_MODULE, import_name
from .python_layout import Layouts
from .tree import ListFiles, ReadFile, ScanMemo, Searched, Tree, file_reader

if TYPE_CHECKING:
    from .drafter_id_fields import IdField
    from .methods import MethodSupport

__all__ = ["ReadFile", "file_reader"]  # re-exported: the tree's reader is the release's

PACKAGE = f"vllm.{MODELS_MODULE}"
"""The model files' package, against which their relative ``from .interfaces import ...`` resolves."""
INTERFACES = f"{MODELS}/interfaces.py"
REGISTRY = f"{MODELS}/registry.py"
RUNNER = "v1/worker/gpu_model_runner.py"
"""The V1 GPU runner (gone in 0.34.0): named only where a test or a doc needs an example; the runners are found."""
EAGLE_CONFIG = "transformers_utils/configs/eagle.py"
NEWEST_TESTED = "0.34.0"
"""The newest vLLM release this tool's tests run on (``tests/helpers/wheel_corpus.py``; a test keeps the two the
same).  A newer one is judged by the same search; ``status`` says it is newer, in one line."""
MARKER = "vllm-eagle3-patch"
"""The comment that marks every place this tool changed (``# vllm-eagle3-patch``)."""
PROPOSER = "v1/spec_decode/eagle.py"
PROPOSER_FILES = ("v1/spec_decode/llm_base_proposer.py", PROPOSER)
"""Where a proposer's ``load_model`` may copy a multimodal target's image token: the proposers' shared base,
once it has a file of its own, else the EAGLE proposer's file."""
LANGUAGE_MODEL_EMBEDDING = ("target_language_model.model", 'getattr(target_language_model, "model"')
"""How a proposer reaches the model of a multimodal target's language model, whose embedding it shares with the
drafter (0.9.1 asks ``get_language_model()`` only for the LM head, and takes the target's own ``model``)."""
IMAGE_TOKEN_FIELD = "image_token_index"
"""The drafter config's field for the target's image token, and the field the proposer's generic branch reads."""
RELAY = "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
"""Model runner V2's EAGLE-3 helpers: from 0.30.0 they carry aux states across pipeline ranks."""
RELAY_SIGN = "def aux_hidden_state_relay_keys"

REGISTERED_MODEL = "init_vllm_registered_model"
"""How a multimodal class builds its language model by the registry, from the architectures its text config names."""
MULTIMODAL_MODELS = "_MULTIMODAL_MODELS"
TEXT_GENERATION_MODELS = "_TEXT_GENERATION_MODELS"

PROTOCOL = "SupportsEagle3"
MIXIN = "EagleModelMixin"
"""Upstream's collecting decoder base (0.18.0+)."""
SETTER = "set_aux_hidden_state_layers"
GETTER = "get_eagle3_aux_hidden_state_layers"
"""The default ids' getter the runner asks for up to 0.17.x."""
DEFAULT_GETTER = "get_eagle3_default_aux_hidden_state_layers"
"""... and from 0.18.0."""
GETTERS = (GETTER, DEFAULT_GETTER)
DRAFTER_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
"""The drafter config's ids, which the runner reads from 0.11.1 on (top level only)."""

GATE_FILES = ("config/speculative.py", "config/__init__.py", "config.py")
"""Where ``SpeculativeConfig`` and its EAGLE-3 target gate live: 0.11.0+, 0.10.1-0.10.2, up to 0.10.0."""
WHITELISTS = ("eagle3_target_supported", "aux_hidden_states_supported")
"""The gate's whitelist: the first name until 0.16.0, the second from 0.17.0 (EAGLE-3 and hidden-state extraction)."""
GATE_SIGNS = (*WHITELISTS, "Eagle3 is only supported")
FIXED_DRAFTER = "Eagle3LlamaForCausalLM"

SETTER_CALL = f".{SETTER}("
"""How a runner hands a target its ids: every file calling this outside a method of that name (a wrapper's
delegation) is a runner's EAGLE-3 wiring, wherever it lives."""
CHECK = "supports_eagle3"
"""The function a runner checks a target with, imported from the protocol's module."""
GETTER_PATTERN = re.compile(r"get_\w*aux_hidden_state_layers")
"""A default-ids getter, as a runner's call site names it (both names above match)."""
V2_PACKAGE = "v1/worker/gpu/"
"""Model runner V2's package (0.17.0 on; the only GPU runner from 0.34.0): a runner found under it is V2's."""
V2_SWITCH = "VLLM_USE_V2_MODEL_RUNNER"
"""The environment variable that pins a runner where a release has two."""
V2_BY_ARCHITECTURE = "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"
"""0.22.0 - 0.28.x: the architectures V2 serves by default (V1 the others)."""
V2_BY_RULE = ("is_moe", "is_hybrid")
"""0.25.0 on: V2 also serves every unlisted model these say is not MoE (or hybrid), which a config tells, not a name."""
SEARCHES = (
    *(SETTER_CALL, f"{CHECK}(", f"class {PROTOCOL}", *LANGUAGE_MODEL_EMBEDDING),
    *(f"{V2_SWITCH}:", V2_BY_ARCHITECTURE),
)
"""Every literal the release's facts search the tree for: found in one pass."""


@dataclass(frozen=True)
class Eagle3Interface:
    """The release's EAGLE-3 contract with a target model."""

    protocol: bool = True
    """Whether ``SupportsEagle3`` exists: the causal LM must list it among its bases."""
    getter: str = GETTER
    """The name under which the runner asks for the default aux layer ids."""
    relay_key: Optional[str] = None
    """Where model runner V2 carries aux states across pipeline ranks (0.30.0 on): the prefix of their
    ``IntermediateTensors`` keys (``EagleModelMixin.AUX_HIDDEN_STATE_KEY``), for a decoder declaring
    ``supports_aux_hidden_states_over_pp``.  None: no runner of the release carries them."""
    runners: tuple[str, ...] = ()
    """The files whose call sites hand a target its ids (``SETTER_CALL``), in path order: every verdict holds
    for each of them."""


@dataclass(frozen=True)
class CallSite:
    """One runner's call of the setter, as read from its file."""

    path: str
    getter: Optional[str]
    """The default-ids getter the calling function asks (None: it names none this tool can read)."""
    checks_with: Optional[str]
    """The module the file imports ``supports_eagle3`` from (None: it checks no protocol, 0.8.5 - 0.10.0)."""


@dataclass(frozen=True)
class InterfaceSearch:
    """What searching the tree established about the EAGLE-3 interface: the call sites, or why it cannot tell."""

    call_sites: tuple[CallSite, ...] = ()
    unknown: Optional[str] = None
    """One line naming what the search did not find, where it found enough to know the interface is there."""


class GpuDefault(enum.Enum):
    """Which of a release's GPU runners serves a model unless ``VLLM_USE_V2_MODEL_RUNNER`` pins one (read from the
    variable's declared default and the release's own list)."""

    ONLY = "the only GPU runner"
    V1 = f"V1 unless {V2_SWITCH}=1"
    LISTED = f"V2 for the architectures in {V2_BY_ARCHITECTURE}, V1 for the others, unless {V2_SWITCH} pins one"
    V2 = f"V2 unless {V2_SWITCH}=0 (or Triton is missing, or a feature V2 lacks is asked for)"
    UNKNOWN = "cannot tell"


class Lookup(enum.Enum):
    """How a release turns a drafter's ``architectures[0]`` into the class it loads for EAGLE-3."""

    FIXED = "the proposer builds Eagle3LlamaForCausalLM whatever the config says"  # 0.8.5
    PREFIX = "EAGLEConfig renames X to Eagle3X unless X starts with Eagle3"  # 0.9.0 - 0.10.0
    PREFIX_OR_SUFFIX = "EAGLEConfig renames X to Eagle3X unless X starts or ends with Eagle3"  # 0.10.1+

    def looked_up(self, architecture: str) -> str:
        if self is Lookup.FIXED:
            return FIXED_DRAFTER
        keep = architecture.startswith("Eagle3") or (
            self is Lookup.PREFIX_OR_SUFFIX and architecture.endswith("Eagle3")
        )
        return architecture if keep else f"Eagle3{architecture}"


class Release:
    """One vLLM tree as this tool sees it: its files through one reader, and what they say.

    Every fact is read on first use and kept: ``status`` never reads the registry, ``doctor``
    never the gate.  :meth:`reading_through` gives a view whose reads go through another
    function (the verdict cache records what a verdict read), sharing nothing it has computed
    but :attr:`layouts`, each a fact of a source text alone.
    """

    def __init__(
        self,
        package_dir: Path,
        read: Optional[ReadFile] = None,
        layouts: Optional[Layouts] = None,
        tree: Optional[Tree] = None,
        files: Optional[ListFiles] = None,
        memo: Optional[ScanMemo] = None,
    ) -> None:
        self.package_dir = package_dir
        self.tree = tree or Tree(
            package_dir, read, files, expected=SEARCHES, keeps={SETTER_CALL: calls_the_setter}, memo=memo
        )
        """The installed files, listed, read and searched: every fact below goes through it."""
        self.read: ReadFile = self.tree.read
        self.layouts = layouts or Layouts()
        """Where the functions and classes of each file read lie: found once, by whoever parses the file first."""

    def reading_through(self, read: ReadFile, searched: Optional[Searched] = None) -> Release:
        return Release(self.package_dir, layouts=self.layouts, tree=self.tree.through(read, searched))

    def exists(self, relative: str) -> bool:
        return (self.package_dir / relative).is_file()

    @cached_property
    def interface_search(self) -> InterfaceSearch:
        """The runners' call sites of the setter, found by searching the tree, and what they ask."""
        sites = tuple(site for path in self.tree.search(SETTER_CALL) for site in self._call_sites(path))
        if not sites:
            checking = [p for p in self.tree.search(f"{CHECK}(") if f"def {CHECK}(" not in (self.read(p) or "")]
            if checking:
                return InterfaceSearch(unknown=f"{checking[0]} calls {CHECK}, but no file calls {SETTER}")
            return InterfaceSearch()
        unread = next((site for site in sites if site.getter is None), None)
        if unread is not None:
            return InterfaceSearch(sites, f"{unread.path} calls {SETTER} but asks no getter this tool can read")
        getters = sorted({site.getter for site in sites if site.getter})
        if len(getters) > 1:
            return InterfaceSearch(sites, f"the runners ask different getters ({', '.join(getters)})")
        modules = sorted({site.checks_with for site in sites if site.checks_with})
        if len(modules) > 1 or (modules and modules[0] != import_name(INTERFACES)):
            found = ", ".join(modules)
            return InterfaceSearch(
                sites, f"the runners import {CHECK} from {found}, not from {import_name(INTERFACES)}"
            )
        if modules and not self._declares_protocol(INTERFACES):
            return InterfaceSearch(sites, f"{INTERFACES} has no class {PROTOCOL}, which the runners check")
        return InterfaceSearch(sites)

    def _call_sites(self, path: str) -> tuple[CallSite, ...]:
        source = self.read(path)  # read through this view: the verdict cache records it
        return self.tree.derived(("call_sites", path, source), lambda: call_sites(path, source))

    def _declares_protocol(self, path: str) -> bool:
        return re.search(rf"^class {PROTOCOL}\b", self.read(path) or "", re.MULTILINE) is not None

    @property
    def unknown(self) -> Optional[str]:
        """Why this tool cannot tell the release's EAGLE-3 interface (None: it can, or there is none)."""
        return self.interface_search.unknown

    @cached_property
    def interface(self) -> Optional[Eagle3Interface]:
        """The runners' contract; None where the release has no EAGLE-3 (no file calls the setter) or the search
        could not establish it (:attr:`unknown`)."""
        search = self.interface_search
        if not search.call_sites or search.unknown is not None:
            return None
        getter = search.call_sites[0].getter or GETTER
        has_protocol = any(site.checks_with for site in search.call_sites)
        runners = tuple(sorted({site.path for site in search.call_sites}))
        relay_key = self._relay_key(self.read(INTERFACES) or "")
        return Eagle3Interface(protocol=has_protocol, getter=getter, relay_key=relay_key, runners=runners)

    def _relay_key(self, interfaces: str) -> Optional[str]:
        if RELAY_SIGN not in (self.read(RELAY) or ""):
            return None
        key = re.search(r"^\s+AUX_HIDDEN_STATE_KEY\b[^=]*=\s*[\"']([^\"']+)[\"']", interfaces, re.MULTILINE)
        return key.group(1) if key else None

    @property
    def no_eagle3(self) -> str:
        """Why :attr:`interface` is None, for a refusal."""
        if self.unknown is not None:
            return f"cannot tell this vLLM's EAGLE-3 interface: {self.unknown}"
        return f"this vLLM has no EAGLE-3 (no file calls {SETTER})"

    @cached_property
    def gate_file(self) -> Optional[str]:
        """The file holding the speculative config's EAGLE-3 gate (else the first config file there is)."""
        existing = [candidate for candidate in GATE_FILES if self.exists(candidate)]
        for candidate in existing:
            if any(sign in (self.read(candidate) or "") for sign in GATE_SIGNS):
                return candidate
        return existing[0] if existing else None

    @cached_property
    def methods(self) -> tuple[MethodSupport, ...]:
        """The hidden-state methods this release has (``methods.METHODS``), and which its gate checks."""
        from .methods import methods_in  # it names the release's fields: imported here, not above

        return methods_in(self.read(self.gate_file) if self.gate_file else None)

    def gate_admits(self, model_type: str) -> bool:
        """Whether this release's EAGLE-3 gate lets ``hf_text_config.model_type`` through as it stands."""
        return gate_admits(self.read(self.gate_file) if self.gate_file else None, model_type)

    @cached_property
    def registry(self) -> dict[str, tuple[str, str]]:
        """The release's model registry: architecture name -> (module, class), commented-out entries excluded."""
        return registry_entries(self.read(REGISTRY) or "")

    @cached_property
    def text_generation_models(self) -> dict[str, tuple[str, str]]:
        """``_TEXT_GENERATION_MODELS``: the decoder architectures the runner may hold."""
        return registry_entries(self.read(REGISTRY) or "", TEXT_GENERATION_MODELS)

    @cached_property
    def multimodal_models(self) -> dict[str, tuple[str, str]]:
        """``_MULTIMODAL_MODELS``: the architectures whose class runs a language model behind encoders of media."""
        return registry_entries(self.read(REGISTRY) or "", MULTIMODAL_MODELS)

    @property
    def registered(self) -> frozenset[str]:
        """Architecture names in the release's model registry."""
        return frozenset(self.registry)

    @cached_property
    def lookup(self) -> Optional[Lookup]:
        """None: the release has no EAGLE-3 drafter loading this tool recognises."""
        eagle_config, proposer = self.read(EAGLE_CONFIG) or "", self.read(PROPOSER) or ""
        if 'endswith("Eagle3")' in eagle_config:
            return Lookup.PREFIX_OR_SUFFIX
        if 'f"Eagle3{arch}"' in eagle_config:
            return Lookup.PREFIX
        if f"{FIXED_DRAFTER}(" in proposer:
            return Lookup.FIXED
        return None

    @cached_property
    def shares_the_language_models_embedding(self) -> bool:
        """Whether the EAGLE proposer takes a multimodal target's token embedding from its language model
        (``get_language_model().model``, 0.9.2 on), not from the target's own ``model``."""
        return any(self.tree.search(sign) for sign in LANGUAGE_MODEL_EMBEDDING)

    @cached_property
    def gpu_default(self) -> GpuDefault:
        """How a release with two GPU runners picks one (``GpuDefault``), read from where it declares the switch."""
        interface = self.interface
        runners = interface.runners if interface is not None else ()
        if len(runners) == 1:
            return GpuDefault.ONLY
        if sum(path.startswith(V2_PACKAGE) for path in runners) != 1 or len(runners) != 2:
            return GpuDefault.UNKNOWN
        declared = [
            re.search(rf"^\s+{V2_SWITCH}:[^=\n]*=\s*(\w+)", self.read(path) or "", re.MULTILINE)
            for path in self.tree.search(f"{V2_SWITCH}:")
        ]
        defaults = {match.group(1) for match in declared if match is not None}
        if defaults == {"False"}:
            return GpuDefault.V1
        if defaults != {"None"}:
            return GpuDefault.UNKNOWN
        return GpuDefault.LISTED if self.v2_architectures else GpuDefault.V2

    @cached_property
    def v2_architectures(self) -> frozenset[str]:
        """The architectures V2 serves by default where the release lists them (``GpuDefault.LISTED``)."""
        listed: set[str] = set()
        for path in self.tree.search(V2_BY_ARCHITECTURE):
            match = re.search(rf"^{V2_BY_ARCHITECTURE}\b[^=]*=\s*frozenset\(([^)]*)\)", self.read(path) or "", re.M)
            listed.update(re.findall(r"[\"']([^\"']+)[\"']", match.group(1)) if match else ())
        return frozenset(listed)

    @cached_property
    def _v2_by_rule(self) -> bool:
        """Whether V2 also takes unlisted models by what their config says (``V2_BY_RULE``, 0.25.0 on); not where
        the deciding function first returns False for an unlisted one (0.22.0: the rule then sorts the listed)."""
        deciding = [
            node
            for source in (self.read(path) or "" for path in self.tree.search(V2_BY_ARCHITECTURE))
            for node in ast.walk(_parsed(source))
            if isinstance(node, ast.FunctionDef) and V2_BY_ARCHITECTURE.lower() in ast.unparse(node).lower()
        ]
        return any(
            any(sign in ast.unparse(function) for sign in V2_BY_RULE) and not _refuses_the_unlisted(function)
            for function in deciding
        )

    def gpu_runner(self, architecture: str) -> Optional[str]:
        """The runner a GPU user gets for ``architecture`` by default (None: this tool cannot tell)."""
        interface, default = self.interface, self.gpu_default
        runners = interface.runners if interface is not None else ()
        v2 = next((path for path in runners if path.startswith(V2_PACKAGE)), None)
        v1 = next((path for path in runners if not path.startswith(V2_PACKAGE)), None)
        if default is GpuDefault.ONLY:
            return runners[0]
        if default is GpuDefault.LISTED:
            if architecture in self.v2_architectures:
                return v2
            return None if self._v2_by_rule else v1
        return {GpuDefault.V1: v1, GpuDefault.V2: v2}.get(default)

    @cached_property
    def drafter_id_fields(self) -> dict[str, Optional[tuple[IdField, ...]]]:
        """Per runner, the drafter-config fields it reads ids from, first match first, with the shift it applies
        (None: its code reads them in a way this tool cannot follow).  They differ between releases and between
        the two runners of one release, so they are read from the runners' code, never tabled."""
        from .drafter_id_fields import id_fields  # it names the release's fields: imported here, not above

        interface = self.interface
        runners = interface.runners if interface is not None else ()
        return {path: id_fields(self.read(path) or "") for path in runners}

    @cached_property
    def reads_drafter_ids(self) -> bool:
        """Whether a runner takes the drafter's top-level ids over the target's (0.11.1 on)."""
        return any(
            DRAFTER_IDS_FIELD in (self.read(path) or "")
            if fields is None
            else any(field.path == (DRAFTER_IDS_FIELD,) for field in fields)
            for path, fields in self.drafter_id_fields.items()
        )


def _refuses_the_unlisted(function: ast.FunctionDef) -> bool:
    """``if not any(arch in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES ...): return False``: unlisted models get V1."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.UnaryOp)
        and isinstance(node.test.op, ast.Not)
        and V2_BY_ARCHITECTURE in ast.unparse(node.test)
        and [ast.unparse(statement) for statement in node.body] == ["return False"]
        for node in ast.walk(function)
    )


def newer_than_tested(version: str) -> bool:
    """Whether ``version`` (``0.35.0``, ``0.35.0rc1``, ``0.35.0+cu130``) is a release after :data:`NEWEST_TESTED`."""
    numbers = [int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3]]
    return bool(numbers) and tuple(numbers) > tuple(int(part) for part in NEWEST_TESTED.split("."))


def registry_entries(source: str, only: Optional[str] = None) -> dict[str, tuple[str, str]]:
    """The registry's dict literals mapping a name to ``(module, class)`` (``only``: the one assigned to that name)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    if only is not None:
        assigned = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and _assigns(n, only)]
        tree = ast.Module(body=[ast.Expr(value) for value in assigned], type_ignores=[])
    entries = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple):
                    strings = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                    module, cls = (*strings, "", "")[:2]
                    entries[key.value] = (module, cls)
    return entries


def _assigns(node: ast.Assign, name: str) -> bool:
    return any(isinstance(target, ast.Name) and target.id == name for target in node.targets)


def gate_admits(source: Optional[str], model_type: str) -> bool:
    """Whether the gate file ``source`` lets ``hf_text_config.model_type`` through, as vLLM tests it: an entry
    of its whitelist as a substring of the model type (0.8.5-0.10.0: ``"llama"``, or this tool's widened tuple)."""
    if not source or not any(sign in source for sign in GATE_SIGNS):
        return True  # no whitelist: supports_eagle3 alone decides
    return any(entry in model_type for entry in admitted_entries(source))


def admitted_entries(source: str) -> tuple[str, ...]:
    """The entries the gate ``source`` matches a model type against: its whitelist's, or (0.8.5-0.10.0) ``"llama"``
    and those of this tool's ``for supported in ("llama", ...)``."""
    listed = whitelisted(source)
    if listed is not None:
        return tuple(listed)
    opened = re.search(r"for supported in \(([^)]*)\)", source)
    return tuple(re.findall(r'"([^"]+)"', opened.group(1))) if opened else ("llama",)


def whitelisted(source: str) -> Optional[list[str]]:
    """The entries of the gate's whitelist (``eagle3_target_supported = [...]``), None where it has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            if any(isinstance(target, ast.Name) and target.id in WHITELISTS for target in node.targets):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return None


def _parsed(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def call_sites(path: str, source: Optional[str]) -> tuple[CallSite, ...]:
    """The calls of the setter in ``source`` that hand a target ids (not a wrapper's ``def`` of the setter
    delegating to its language model), each with the getter its function asks and the protocol check's module."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return ()
    checks_with = next(
        (
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == CHECK for a in node.names)
        ),
        None,
    )
    sites = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name == SETTER:
            continue
        called = [name for name in map(_method_called, _own_nodes(function)) if name is not None]
        if SETTER in called:
            asked = {name for name in called if GETTER_PATTERN.fullmatch(name)}
            getter = asked.pop() if len(asked) == 1 else None
            sites.append(CallSite(path, getter, checks_with))
    return tuple(sites)


_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


def calls_the_setter(source: str) -> bool:
    """Whether a line calling the setter lies, by indentation, outside a ``def`` of the setter itself (a wrapper
    handing the ids on), told without parsing: the files :func:`call_sites` may find a runner in.  A patched tree
    has a hundred delegations, and the search's answer must stay the runners (the verdict cache keeps it)."""
    defs = [(m.start(), len(m.group(1).expandtabs()), m.group(2)) for m in _DEF.finditer(source)]
    starts = [d[0] for d in defs]
    start = source.find(SETTER_CALL)
    while start >= 0:
        line_start = source.rfind("\n", 0, start) + 1
        index = bisect.bisect_left(starts, line_start) - 1  # the last def before the line
        if index < 0 or defs[index][2] != SETTER or not _inside(source, defs[index], line_start):
            return True
        start = source.find(SETTER_CALL, start + 1)
    return False


def _inside(source: str, definition: tuple[int, int, str], line_start: int) -> bool:
    """Whether every code line from ``definition``'s ``def`` to ``line_start`` is indented deeper than it."""
    position, depth, _ = definition
    body = source[source.find("\n", position) + 1 : line_start].splitlines()
    code = [line for line in body if line.strip() and not line.lstrip().startswith("#")]
    return all(len(line.expandtabs()) - len(line.expandtabs().lstrip()) > depth for line in code)


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of ``function``'s body, not those of functions defined inside it."""
    found, stack = [], list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _method_called(node: ast.AST) -> Optional[str]:
    """The method ``node`` calls (``x.name(...)`` -> ``name``), None where it is no such call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None
