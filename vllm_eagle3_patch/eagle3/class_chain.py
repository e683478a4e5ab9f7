"""The classes a registered model class inherits from, resolved through the model files' own imports.

The runner asks ``supports_eagle3`` of the class the registry names; whether it passes depends on the
whole chain of its bases, across files (``Phi3ForCausalLM(LlamaForCausalLM)`` in ``phi3.py``).  This
reads the chain with :mod:`ast` (no LibCST, no import of vLLM): the classes of vLLM's files, their
bases, and the ``from .x import Y`` / ``from vllm.a.b import Y`` lines that name them.  Modules are
named relative to the ``vllm`` package (``model_executor.models.llama``, ``models.deepseek_v32``).
"""

from __future__ import annotations

import ast
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from .loop_shapes import may_be_a_decoder_loop
from .modules import path_of, registry_module
from .platforms import cuda_binding
from .python_layout import (
    ClassBody,
    ClassSpan,
    Layout,
    Layouts,
    MisSplit,
    class_body,
    class_tree,
    layout_of,
    python_tree,
    source_lines,
    split_module,
)
from .release import GETTERS, MARKER, PROTOCOL, REGISTERED_MODEL, ReadFile

RunAll = Callable[[Sequence[Callable[[], "dict[str, Optional[_Module]]"]], Sequence[float]], list]
"""Runs jobs, given their weights, and returns their results in order (``codemod/two_processes.py``)."""


def _run_here(jobs: Sequence[Callable[[], dict[str, Optional[_Module]]]], weights: Sequence[float]) -> list:
    """A :data:`RunAll` running every job in this process, in order."""
    return [job() for job in jobs]


@dataclass(frozen=True)
class ClassInfo:
    module: str
    """The module, relative to ``vllm`` (``model_executor.models.llama``)."""
    name: str
    bases: tuple[str, ...]
    """The bases as written (``nn.Module``, ``SupportsEagle3``, ``LlamaForCausalLM``)."""
    methods: frozenset[str]
    holds: tuple[tuple[str, str], ...] = ()
    """What ``__init__`` builds, in order: ``self.model = DeepseekV2Model(...)`` -> ``("model", "DeepseekV2Model")``."""
    loops: bool = False
    """Whether its own ``forward`` has a statement where a decoder loop stands, a top-level ``for``
    (``loop_shapes.py``): it is the decoder, not a class handing the work to one it holds (OPT's
    ``self.decoder``); whether its loop has one of the shapes is the codemod's to say."""
    returns_from: Optional[str] = None
    """The attribute whose call its own ``forward`` returns the result of, unchanged (``self.language_model.model(...)``
    -> ``language_model``): what a multimodal class runs its language model through.  None: no one such attribute."""
    collects: bool = False
    """Its own ``forward`` collects aux hidden states as upstream's EAGLE-3 decoders do (``if idx in
    self.aux_hidden_state_layers``, or ``EagleModelMixin``'s ``self._maybe_add_hidden_state(...)``)."""
    reads_encoder_outputs: bool = False
    """Its own ``forward`` takes ``encoder_outputs``: an encoder-decoder model's (Whisper's), whose decoder
    cross-attends to them."""
    registered: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """What ``__init__`` builds by the registry (``self.language_model = init_vllm_registered_model(...)``) -> the
    architectures the call names (``architectures=["Qwen2ForCausalLM"]``; none: the checkpoint's text config
    names it)."""


@dataclass(frozen=True)
class Chain:
    """A registered class and every class it inherits from that the model files define."""

    classes: tuple[ClassInfo, ...]
    """The registered class first, then its bases found in the model files, depth first."""
    base_names: frozenset[str]
    """Every base name anywhere on the chain, resolved or not (``SupportsEagle3``, ``EagleModelMixin``)."""

    @property
    def declares_eagle3(self) -> bool:
        """Whether the class passes ``supports_eagle3``: the protocol on its chain, or (before the
        protocol) both methods by name."""
        methods = {m for cls in self.classes for m in cls.methods}
        return PROTOCOL in self.base_names or (
            "set_aux_hidden_state_layers" in methods and bool(methods & set(GETTERS))
        )

    def includes(self, module: str, name: str) -> bool:
        return any(cls.module == module and cls.name == name for cls in self.classes)


class ChainReader:
    """Reads model files once each (through the release's reader) and resolves chains."""

    def __init__(self, read: ReadFile, layouts: Optional[Layouts] = None) -> None:
        self._read = read
        self._layouts = layouts or Layouts()
        """Each file's layout, kept as it is parsed: the judge lays out many of the same files."""
        self._parsed: dict[str, Optional[_Module]] = {}
        self._skipped: set[str] = set()
        """While a job of a round follows the chains of its file's classes: the files other jobs parse."""
        self._unread: Optional[dict[str, set[str]]] = None
        """While the chains' files are read ahead: the modules a chain asked for that are not parsed yet, each with
        the classes asked for."""

    def registered(self, module: str, name: str) -> Optional[Chain]:
        """The chain of a registry entry (``("llama", "LlamaForCausalLM")``)."""
        return self.chain(registry_module(module), name)

    def chain(self, module: str, name: str) -> Optional[Chain]:
        """The chain of ``module.name``; None where the file or the class is not there."""
        first = self._class(module, name)
        if first is None:
            return None
        classes: list[ClassInfo] = []
        base_names: set[str] = set()
        pending = [first]
        while pending and len(classes) < 32:
            cls = pending.pop(0)
            if cls in classes:
                continue
            classes.append(cls)
            base_names.update(base.rsplit(".", 1)[-1] for base in cls.bases)
            for base in cls.bases:
                found = self.resolve(cls.module, base)
                if found is not None:
                    pending.append(found)
        return Chain(tuple(classes), frozenset(base_names))

    def resolve(self, module: str, base: str) -> Optional[ClassInfo]:
        """``base`` as named in ``module``: a class of that file, or one it imports from another model file."""
        parsed = self._module(module)
        if parsed is None:
            return None
        simple = base.rsplit(".", 1)[-1]
        if simple in parsed.spans and "." not in base:
            return self._info(module, parsed, simple)
        imported = parsed.imports.get(simple)
        if imported is not None:
            return self._class(*imported)
        return None

    def platform_variants(self, module: str, name: str) -> tuple[ClassInfo, ...]:
        """The classes a platform-split package (``vllm.models.hy_v4``, 0.22.0 on) binds ``name`` to, one per
        import of it (``nvidia/``, ``amd/``, the generic model file), where it imports it from more than one
        module: which one a process gets depends on its platform, so each must be judged.  () elsewhere."""
        parsed = self._module(module)
        if parsed is None or name in parsed.spans or len(parsed.variants.get(name, ())) < 2:
            return ()
        found = (self._class(*binding) for binding in parsed.variants[name])
        return tuple(dict.fromkeys(cls for cls in found if cls is not None))

    def cuda_variant(self, module: str, name: str) -> Optional[ClassInfo]:
        """Of :meth:`platform_variants`, the class a CUDA process imports (``eagle3/platforms.py``); None where the
        package's guards cannot tell."""
        parsed = self._module(module)
        binding = parsed.on_cuda.get(name) if parsed is not None else None
        return self._class(*binding) if binding is not None else None

    def defined_in(self, module: str, name: str) -> Optional[ClassInfo]:
        """``name`` as a class ``module``'s own file defines (what :meth:`resolve` finds there, without reading
        the files the others are imported from)."""
        parsed = self._module(module)
        return self._info(module, parsed, name) if parsed is not None and name in parsed.spans else None

    def _class(self, module: str, name: str, hops: int = 8) -> Optional[ClassInfo]:
        """``module.name``, following re-exports (a package's ``__init__`` importing the class from
        the module that defines it; where it imports per platform, the last binding: the generic one)."""
        parsed = self._module(module, name)
        if parsed is None:
            return None
        if name in parsed.spans:
            return self._info(module, parsed, name)
        imported = parsed.imports.get(name)
        return self._class(*imported, hops - 1) if imported is not None and hops > 0 else None

    def _info(self, module: str, parsed: _Module, name: str) -> Optional[ClassInfo]:
        """A class of a file read (``name in parsed.spans``), parsed now where it was not yet; where it is not where
        the split put it, the file is parsed whole."""
        if name not in parsed.classes:
            source, is_package = self._source(module)
            try:
                read = _read_classes(module, _Text(source or ""), parsed.spans, (name,))
            except MisSplit:
                whole = self._parsed[module] = read_model_file_whole(module, source, is_package)
                return whole.classes.get(name) if whole is not None else None
            parsed.classes.update((n, info) for n, (info, _) in read.items() if n not in parsed.classes)
        return parsed.classes[name]

    def read_ahead(self, wanted: Mapping[str, Iterable[str]], run_all: RunAll = _run_here) -> None:
        """Parse the modules of ``wanted`` now, and of each the classes it names and the files their chains lead
        to (bases, platform variants: not those of ``wanted``, which have their own jobs), the jobs run by
        ``run_all`` (discovery's runs them on two processes): finding the families reads every registered model
        file.  Every file is read here too, through the reader, so that a reader recording what was read sees them
        all (a second process reads for itself)."""
        modules = [module for module in wanted if module not in self._parsed]
        sources = [self._source(module) for module in modules]
        others = set(modules)
        jobs = [
            lambda module=module, found=found: self._read_chains_of(module, found[0], found[1], wanted[module], others)
            for module, found in zip(modules, sources)
        ]
        weights = [math.inf if is_package else len(source or "") for source, is_package in sources]
        for parsed in run_all(jobs, weights):  # a package's job first: it parses the platform variants it imports
            for module, found in parsed.items():
                self._parsed.setdefault(module, found)
                source, _ = self._source(module)
                if source is not None:
                    self._layouts.remember(source, found.layout if found is not None else None)

    def _read_chains_of(
        self, module: str, source: Optional[str], is_package: bool, names: Iterable[str], others: set[str]
    ) -> dict[str, Optional[_Module]]:
        """``module`` parsed, and the files the chains of its classes ``names`` lead to but ``others``, by module."""
        before = set(self._parsed)
        self._parsed[module] = read_model_file(module, source, is_package, tuple(names))
        self._skipped = others
        try:
            for name in names:
                self.chain(module, name)
                for variant in self.platform_variants(module, name):
                    self.chain(variant.module, variant.name)
        finally:
            self._skipped = set()
        return {found: self._parsed[found] for found in self._parsed if found not in before}

    def read_chains_ahead(self, classes: Iterable[tuple[str, str]], run_all: RunAll) -> None:
        """Parse the files of the chains of ``classes`` (``(module, name)`` pairs) now, round by round on
        ``run_all``: the classes' own files, then those their re-exports, bases and platform variants lead to,
        until no chain asks for a file not parsed yet.  Nothing is parsed here that :meth:`chain` would not parse."""
        classes = list(dict.fromkeys(classes))
        wanted: dict[str, set[str]] = {}
        for module, name in classes:
            wanted.setdefault(module, set()).add(name)
        while wanted:
            self.read_ahead(wanted, run_all)
            self._unread = {}
            try:
                for module, name in classes:
                    self.chain(module, name)
                    for variant in self.platform_variants(module, name):  # each platform's class is judged
                        self.chain(variant.module, variant.name)
                wanted = dict(sorted(self._unread.items()))
            finally:
                self._unread = None

    def _module(self, module: str, name: Optional[str] = None) -> Optional[_Module]:
        if module not in self._parsed:
            if module in self._skipped:  # another job of the round parses it
                return None
            if self._unread is not None:  # reading ahead: asked for next round
                self._unread.setdefault(module, set()).update([name] if name else [])
                return None
            self._parsed[module] = read_model_file(module, *self._source(module), [name] if name else [])
        return self._parsed[module]

    def _source(self, module: str) -> tuple[Optional[str], bool]:
        """The module's file, and whether it is a package's ``__init__``."""
        source = self._read(path_of(module))
        if source is not None:
            return source, False
        return self._read(path_of(module, package=True)), True


@dataclass(frozen=True)
class _Module:
    classes: dict[str, ClassInfo]
    """The classes read so far (the others of ``spans`` are read when asked for: :meth:`ChainReader._info`)."""
    spans: dict[str, ClassSpan]
    """Every module-level class, by name (the last of a name, as Python binds it)."""
    imports: dict[str, tuple[str, str]]
    """A name bound by ``from .x import Y [as Z]`` -> (``x``, ``Y``)."""
    layout: Layout
    variants: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """A name bound by imports from several modules (one per platform) -> each binding, in the file's order."""
    on_cuda: dict[str, Optional[tuple[str, str]]] = field(default_factory=dict)
    """Of ``variants``, the binding a CUDA process runs (None: the guards cannot tell)."""


def read_model_file(
    module: str, source: Optional[str], is_package: bool = False, wanted: Iterable[str] = ()
) -> Optional[_Module]:
    """The file's imports, its classes' places, and the classes ``wanted`` read, with those of the file they build
    or inherit from (what a chain asks next); the file split at its classes (``python_layout.split_module``), else,
    or where a class is not where the split says, parsed whole."""
    if source is None:
        return None
    split = split_module(source)
    if split is not None:
        try:
            return _read_module(module, source, is_package, split.rest, split.layout, wanted)
        except MisSplit:
            pass
    return read_model_file_whole(module, source, is_package)


def read_model_file_whole(module: str, source: Optional[str], is_package: bool) -> Optional[_Module]:
    """What :func:`read_model_file` finds, every class read, from the file parsed whole."""
    if source is None:
        return None
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError):
        return None
    return _read_module(module, source, is_package, tree, layout_of(tree), None)


def _read_module(
    module: str, source: str, is_package: bool, tree: ast.Module, layout: Layout, wanted: Optional[Iterable[str]]
) -> _Module:
    """``tree`` is the whole file's where ``wanted`` is None (every class read from it), else the file's but its
    classes (``SplitModule.rest``)."""
    spans = {span.name: span for span in layout if isinstance(span, ClassSpan)}
    text = _Text(source)
    if wanted is None:
        nodes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        classes = {name: text.class_info(module, node) for name, node in nodes.items()}
    else:
        read = _read_classes(module, text, spans, wanted)
        classes = {name: info for name, (info, _) in read.items()}
        layout = tuple(
            span._replace(body=read[span.name][1])
            if isinstance(span, ClassSpan) and span.name in read and spans[span.name] is span
            else span
            for span in layout
        )
        spans = {span.name: span for span in layout if isinstance(span, ClassSpan)}
    imports: dict[str, tuple[str, str]] = {}
    bindings: dict[str, list[tuple[str, str]]] = {}
    for node in _statements(ast.Module([n for n in tree.body if not isinstance(n, ast.ClassDef)], [])):
        if isinstance(node, ast.ImportFrom):  # a class's own imports bind nothing at module level
            source_module = _imported_module(module, node, is_package)
            if source_module is not None:
                for alias in node.names:
                    imports[alias.asname or alias.name] = (source_module, alias.name)
                    bindings.setdefault(alias.asname or alias.name, []).append((source_module, alias.name))
    variants = {name: tuple(dict.fromkeys(found)) for name, found in bindings.items() if len(set(found)) > 1}
    resolve = lambda node: _imported_module(module, node, is_package)
    on_cuda = {name: cuda_binding(tree, name, resolve) for name in variants}
    return _Module(classes, spans, imports, layout, variants, on_cuda)


def _read_classes(
    module: str, text: _Text, spans: dict[str, ClassSpan], wanted: Iterable[str]
) -> dict[str, tuple[ClassInfo, ClassBody]]:
    """The classes ``wanted``, and those of the file they inherit from, or build in ``__init__`` and those build in
    turn (what finding a family asks of them next: ``discovery._held_model``, ``_inner_decoder``), each parsed
    alone, with their bodies' layouts."""
    read: dict[str, tuple[ClassInfo, ClassBody]] = {}
    pending = [(name, 0) for name in wanted if name in spans]
    while pending:
        name, built = pending.pop()
        if name in read:
            continue
        node = class_tree(text.lines, spans[name])
        info = text.class_info(module, node)
        read[name] = (info, class_body(node))
        pending += [(base, built) for base in info.bases if base in spans]
        if built < _BUILT:
            pending += [(callee, built + 1) for _, callee in info.holds if callee in spans]
    return read


_BUILT = 2
"""How far :func:`_read_classes` follows what a class builds: its model, and what the model builds (OPT's decoder)."""


class _Text:
    """A model file's text, as reading its classes needs it."""

    def __init__(self, source: str) -> None:
        self.lines = source_lines(source)
        """Numbered as the standard library numbers them (``class_tree``)."""
        self._collecting = _mentions_collecting(source)

    def class_info(self, module: str, node: ast.ClassDef) -> ClassInfo:
        def upstream(node: Union[ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef]) -> bool:
            """Not added by this tool: the chain is judged as vLLM wrote it, patched or not."""
            first, body = node.lineno - 1, node.body[0].lineno - 1
            return not any(MARKER in line for line in self.lines[first : max(body, first + 1)])

        return ClassInfo(
            module,
            node.name,
            tuple(_dotted(base) for base in node.bases if upstream(node) or _dotted(base) != PROTOCOL),
            frozenset(m for m in _methods(node) if upstream(_method(node, m))),
            _built_in_init(node),
            _forward_loops(node),
            _forward_returns_from(node),
            self._collecting and _forward_collects(node),
            "encoder_outputs" in _forward_parameters(node),
            _registered_in_init(node),
        )


_BLOCKS = ("body", "handlers", "orelse", "finalbody", "cases")
"""The fields of a statement that hold statements (``except`` clauses and ``case`` blocks too), in the order of
the nodes' own fields: every other field holds expressions or names."""


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every statement under ``node``, nested ones included (``if TYPE_CHECKING:``, ``try:``), breadth first
    as :func:`ast.walk`; expressions, which hold none, are never entered: most of a module's nodes."""
    queue = deque([node])
    while queue:
        current = queue.popleft()
        for block in _BLOCKS:
            for child in getattr(current, block, ()):
                queue.append(child)
                yield child


def _imported_module(module: str, node: ast.ImportFrom, is_package: bool) -> Optional[str]:
    """The module of ``vllm`` an import names: ``from .llama import X`` in ``model_executor.models.phi3``
    -> ``model_executor.models.llama``; ``from vllm.x.y import X`` -> ``x.y``; others (torch...): None."""
    if node.level == 0:
        name = node.module or ""
        return name.removeprefix("vllm.") if name.startswith("vllm.") else None
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])]) or None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):  # Generic[...] and the like
        return _dotted(node.value)
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _method(node: ast.ClassDef, name: str) -> Union[ast.FunctionDef, ast.AsyncFunctionDef]:
    return next(s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name)


def _methods(node: ast.ClassDef) -> frozenset[str]:
    return frozenset(s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _built_in_init(node: ast.ClassDef) -> tuple[tuple[str, str], ...]:
    """``(attribute, callee)`` for each ``self.<attribute> = <Callee>(...)`` in ``__init__``, top-level
    statements first.  The callee may be named indirectly: a parameter with a class for default
    (``model_type: type[InternLM2Model] = InternLM2Model``), a class attribute (``self.model_cls(...)``
    with ``model_cls = AXK1Model``) or a method returning ``<Class>(...)`` (``self._init_model(...)``)."""
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None:
        return ()
    arguments = [*init.args.posonlyargs, *init.args.args]
    defaults = dict(zip([a.arg for a in arguments][len(arguments) - len(init.args.defaults) :], init.args.defaults))
    defaults.update({a.arg: d for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults) if d is not None})
    members = _class_members(node)
    built = []
    for attribute, value in _assigned_in_init(init):
        callee = None
        if isinstance(value.func, ast.Name):
            default = defaults.get(value.func.id)
            callee = default.id if isinstance(default, ast.Name) else value.func.id
        elif isinstance(value.func, ast.Attribute) and _is_self(value.func.value):
            callee = members.get(value.func.attr)
        if callee is not None:
            built.append((attribute, callee))
    return tuple(built)


def _assigned_in_init(init: ast.FunctionDef) -> Iterator[tuple[str, ast.Call]]:
    """``(attribute, call)`` for each ``self.<attribute>[: T] = <call>`` in ``__init__``, or ``self.<attribute> = x``
    where ``x = <call>`` came before (``language_model = init_vllm_registered_model(...)``)."""
    local: dict[str, ast.Call] = {}
    for statement in _statements(init):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            local[target.id] = value
        elif isinstance(target, ast.Attribute) and _is_self(target.value):
            call = local.get(value.id) if isinstance(value, ast.Name) else value
            if isinstance(call, ast.Call):
                yield target.attr, call


def _class_members(node: ast.ClassDef) -> dict[str, str]:
    """Class attributes bound to a name (``model_cls = AXK1Model``) and methods that end by
    returning ``<Name>(...)`` (``_init_model``), each -> that name."""
    members = {}
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.value, ast.Name):
            if isinstance(statement.targets[0], ast.Name):
                members[statement.targets[0].id] = statement.value.id
        elif isinstance(statement, ast.FunctionDef) and statement.body:
            last = statement.body[-1]
            if (
                isinstance(last, ast.Return)
                and isinstance(last.value, ast.Call)
                and isinstance(last.value.func, ast.Name)
            ):
                members[statement.name] = last.value.func.id
    return members


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _forward_loops(node: ast.ClassDef) -> bool:
    """Whether the class's own ``forward`` has a statement that may be a decoder loop (``loop_shapes.py``)."""
    forward = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    return forward is not None and any(may_be_a_decoder_loop(statement) for statement in forward.body)


def _forward_returns_from(node: ast.ClassDef) -> Optional[str]:
    """The one attribute ``X`` such that every ``return`` of the class's own ``forward`` gives the result of a
    ``self.X(...)`` or ``self.X.<name>(...)`` call, directly or through a name bound to it; ``self.X`` may be
    reached through a local name for it (``language_model = self.language_model``), which may descend into it
    (``language_model = language_model.language_model``)."""
    forward = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    if forward is None:
        return None
    aliases = _aliases_of_self_attributes(forward)
    bound: dict[str, Optional[str]] = {}
    returned: set[Optional[str]] = set()
    for statement in _statements(forward):  # statements only: no expression holds an assignment or a return
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            if isinstance(statement.targets[0], ast.Name) and statement.targets[0].id not in aliases:
                name = statement.targets[0].id
                called = _self_attribute_called(statement.value, aliases)
                bound[name] = called if bound.get(name, called) == called else None
        elif isinstance(statement, ast.Return):
            value = statement.value
            returned.add(bound.get(value.id) if isinstance(value, ast.Name) else _self_attribute_called(value, aliases))
    return returned.pop() if len(returned) == 1 else None


def _aliases_of_self_attributes(forward: ast.FunctionDef) -> dict[str, str]:
    """Local names every assignment of which binds ``self.X`` or an attribute of the name itself, by ``X``."""
    assigned: dict[str, set[Optional[str]]] = {}
    for statement in _statements(forward):
        if not isinstance(statement, ast.Assign):
            continue
        value = statement.value
        for target in statement.targets:
            if isinstance(target, ast.Name):
                if isinstance(value, ast.Attribute) and _is_self(value.value):
                    assigned.setdefault(target.id, set()).add(value.attr)
                elif (
                    isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == target.id
                ):
                    assigned.setdefault(target.id, set())
                else:
                    assigned.setdefault(target.id, set()).add(None)
    return {name: x for name, xs in assigned.items() if len(xs) == 1 for x in xs if x is not None}


def _self_attribute_called(node: Optional[ast.expr], aliases: dict[str, str]) -> Optional[str]:
    """``X`` of a ``self.X(...)`` or ``self.X.<name>(...)`` call, ``self.X`` written as itself or as one of
    ``aliases``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return aliases.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    if _is_self(func.value):
        return func.attr
    if isinstance(func.value, ast.Name):
        return aliases.get(func.value.id)
    if isinstance(func.value, ast.Attribute) and _is_self(func.value.value):
        return func.value.attr
    return None


def _registered_in_init(node: ast.ClassDef) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(attribute, architectures)`` of each ``self.<attribute> = init_vllm_registered_model(...)`` in ``__init__``."""
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    found = []
    for attribute, call in _assigned_in_init(init) if init is not None else ():
        if isinstance(call.func, ast.Name) and call.func.id == REGISTERED_MODEL:
            named = next((k.value for k in call.keywords if k.arg == "architectures"), None)
            elements = named.elts if isinstance(named, (ast.List, ast.Tuple)) else []
            names = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            found.append((attribute, tuple(names)))
    return tuple(found)


_COLLECTING = ("aux_hidden_state_layers", "_maybe_add_hidden_state")
"""The attributes of ``self`` a ``forward`` that collects aux hidden states reads."""


def _mentions_collecting(source: str) -> bool:
    """Whether ``source`` names an attribute of :data:`_COLLECTING` at all: where it does not, no ``forward``
    of the file collects, and none need be walked (most files; a walk visits every node of ``forward``)."""
    return any(name in source for name in _COLLECTING)


def _forward_collects(node: ast.ClassDef) -> bool:
    forward = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    return forward is not None and any(
        isinstance(n, ast.Attribute) and n.attr in _COLLECTING and _is_self(n.value) for n in ast.walk(forward)
    )


def _forward_parameters(node: ast.ClassDef) -> tuple[str, ...]:
    forward = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    arguments = forward.args if forward is not None else None
    return tuple(a.arg for a in (*arguments.args, *arguments.kwonlyargs)) if arguments else ()
