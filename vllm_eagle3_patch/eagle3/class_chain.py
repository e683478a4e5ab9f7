"""The classes a registered model class inherits from, resolved through the model files' own imports.

The runner asks ``supports_eagle3`` of the class the registry names; whether it passes depends on the
whole chain of its bases, across files (``Phi3ForCausalLM(LlamaForCausalLM)`` in ``phi3.py``).  This
reads the chain with :mod:`ast` (no LibCST, no import of vLLM): the classes of vLLM's files, their
bases, and the ``from .x import Y`` / ``from vllm.a.b import Y`` lines that name them.  Modules are
named relative to the ``vllm`` package (``model_executor.models.llama``, ``models.deepseek_v32``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from .release import GETTERS, PROTOCOL, ReadFile

MODELS = "model_executor.models"
"""Where the registry's bare module names live (``llama``); newer registries also name ``vllm.models.x``."""


@dataclass(frozen=True)
class ClassInfo:
    module: str
    """The module, relative to ``vllm`` (``model_executor.models.llama``)."""
    name: str
    bases: tuple[str, ...]
    """The bases as written (``nn.Module``, ``SupportsEagle3``, ``LlamaForCausalLM``)."""
    methods: frozenset[str]


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

    def __init__(self, read: ReadFile) -> None:
        self._read = read
        self._parsed: dict[str, Optional[_Module]] = {}

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
                found = self._resolve(cls.module, base)
                if found is not None:
                    pending.append(found)
        return Chain(tuple(classes), frozenset(base_names))

    def _resolve(self, module: str, base: str) -> Optional[ClassInfo]:
        """``base`` as named in ``module``: a class of that file, or one it imports from another model file."""
        parsed = self._module(module)
        if parsed is None:
            return None
        simple = base.rsplit(".", 1)[-1]
        if simple in parsed.classes and "." not in base:
            return parsed.classes[simple]
        imported = parsed.imports.get(simple)
        if imported is not None:
            return self._class(*imported)
        return None

    def _class(self, module: str, name: str, hops: int = 8) -> Optional[ClassInfo]:
        """``module.name``, following re-exports (a package's ``__init__`` importing the class from
        the module that defines it; where it imports per platform, the last binding: the generic one)."""
        parsed = self._module(module)
        if parsed is None:
            return None
        if name in parsed.classes:
            return parsed.classes[name]
        imported = parsed.imports.get(name)
        return self._class(*imported, hops - 1) if imported is not None and hops > 0 else None

    def _module(self, module: str) -> Optional[_Module]:
        if module not in self._parsed:
            path = module.replace(".", "/")
            source = self._read(f"{path}.py")
            is_package = source is None
            if is_package:
                source = self._read(f"{path}/__init__.py")
            self._parsed[module] = _parse(module, source, is_package)
        return self._parsed[module]


def registry_module(module: str) -> str:
    """The registry's module name as a module of ``vllm``: ``llama`` or ``vllm.models.beam``."""
    return module.removeprefix("vllm.") if module.startswith("vllm.") else f"{MODELS}.{module}"


@dataclass(frozen=True)
class _Module:
    classes: dict[str, ClassInfo]
    imports: dict[str, tuple[str, str]]
    """A name bound by ``from .x import Y [as Z]`` -> (``x``, ``Y``)."""


def _parse(module: str, source: Optional[str], is_package: bool = False) -> Optional[_Module]:
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    classes = {
        node.name: ClassInfo(module, node.name, tuple(_dotted(base) for base in node.bases), _methods(node))
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = _imported_module(module, node, is_package)
            if source_module is not None:
                for alias in node.names:
                    imports[alias.asname or alias.name] = (source_module, alias.name)
    return _Module(classes, imports)


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


def _methods(node: ast.ClassDef) -> frozenset[str]:
    return frozenset(s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
