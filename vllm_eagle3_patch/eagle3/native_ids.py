"""The layer ids a class that implements EAGLE-3 itself hands the drafter by default, read by structure.

The runner calls the class's getter (``get_eagle3_aux_hidden_state_layers``) unless the drafter's config
names ids; upstream writes it as ``num_layers = len(self.model.layers)`` then ``return (2, num_layers // 2,
num_layers - 3)``, but a class may write its own.  This reads the getter the chain resolves to, with
:mod:`ast`, and evaluates its returned tuple for ``n`` layers; a getter of any other shape (one that delegates
to a language model, say) is not guessed at.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from .class_chain import Chain, ChainReader, ClassInfo
from .modules import path_of
from .release import GETTERS, ReadFile

_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}


@dataclass(frozen=True)
class NativeDefault:
    where: str
    """``llama.py's LlamaForCausalLM.get_eagle3_aux_hidden_state_layers``."""
    expression: ast.expr
    layer_counts: frozenset[str]
    """The local names bound to ``len(...)``: the layer count."""

    @property
    def text(self) -> str:
        return ast.unparse(self.expression)

    def ids(self, num_layers: int) -> Optional[tuple[int, ...]]:
        """The ids for ``num_layers`` layers (None: the expression is not plain arithmetic on the count)."""
        if not isinstance(self.expression, (ast.Tuple, ast.List)):
            return None
        values = [_evaluate(e, num_layers, self.layer_counts) for e in self.expression.elts]
        ids = [v for v in values if v is not None]
        return tuple(ids) if len(ids) == len(values) else None


def native_default(chain: Chain, read: ReadFile, getters: tuple[str, ...] = GETTERS) -> Optional[NativeDefault]:
    """The getter (the runner's, ``getters``) of the first class on ``chain`` that defines one, as written
    upstream (None: none readable)."""
    for cls in chain.classes:
        getter = next((name for name in getters if name in cls.methods), None)
        if getter is None:
            continue
        path = path_of(cls.module)
        try:
            tree = ast.parse(read(path) or "")
        except SyntaxError:
            return None
        found = [
            node
            for klass in tree.body
            if isinstance(klass, ast.ClassDef) and klass.name == cls.name
            for node in klass.body
            if isinstance(node, ast.FunctionDef) and node.name == getter
        ]
        return _read_getter(found[0], f"{path.rsplit('/', 1)[-1]}'s {cls.name}.{getter}") if found else None
    return None


def _read_getter(function: ast.FunctionDef, where: str) -> Optional[NativeDefault]:
    counts = {
        target.id
        for node in function.body
        if isinstance(node, ast.Assign) and _is_len(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    returned = [node.value for node in function.body if isinstance(node, ast.Return) and node.value is not None]
    return NativeDefault(where, returned[-1], frozenset(counts)) if len(returned) == 1 else None


def _is_len(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def _evaluate(node: ast.AST, n: int, counts: frozenset[str]) -> Optional[int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if (isinstance(node, ast.Name) and node.id in counts) or _is_len(node):
        return n
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, n, counts), _evaluate(node.right, n, counts)
        if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
            return None
        return _OPERATORS[type(node.op)](left, right)
    return None


# --------------------------------------------------------------------------- ids a native decoder cannot capture


@dataclass(frozen=True)
class Uncapturable:
    """The aux ids vLLM's own decoder of a registered class cannot hand over, each as the ``path:line`` that says
    why (None: it can, or this tool cannot find the decoder's capture)."""

    first_layer: Optional[str] = None
    """Id 0.  Upstream's own collecting loops (``qwen2.py`` up to 0.17.x, which Qwen2-VL inherits;
    ``deepseek_v2.py`` from 0.18.0) capture ``hidden_states + residual`` at the top of the loop, while ``residual``
    is still the ``None`` the first rank starts with: a drafter asking for id 0 makes the engine fail in its first
    forward."""
    last_layer: Optional[str] = None
    """Id n, the stream leaving the last layer.  ``llama.py`` on 0.17.1 tests ``idx in self.aux_hidden_state_layers``
    before calling layer ``idx`` and nothing after the loop, so a deployment asking for id n (what a trainer that
    takes its targets from the last layer's states asks ``extract_hidden_states`` for) gets one state fewer and the
    engine fails at start."""


def uncapturable_ids(
    reader: ChainReader, read: ReadFile, module: str, cls: str, registry: Mapping[str, tuple[str, str]]
) -> Uncapturable:
    """Where the decoder a registered class runs cannot capture id 0 or id n, its file parsed once.  The decoders
    this tool patches capture both (``patches/decoder_loop.py``); vLLM's own must be warned about."""
    found = _decoder_forward(reader, read, module, cls, registry)
    if found is None:
        return Uncapturable()
    path, forward = found
    first, last = _capture_of_none(forward), _captures_only_before_each_layer(forward)
    return Uncapturable(
        f"{path}:{first}" if first is not None else None, f"{path}:{last}" if last is not None else None
    )


def _captures_only_before_each_layer(forward: ast.FunctionDef) -> Optional[int]:
    """The line of the decoder loop's capture where every capture tests the loop's index before its layer runs and
    none follows the loop: id n is never reached."""
    loop = next((s for s in ast.walk(forward) if isinstance(s, ast.For) and _mentions_aux_layers(s)), None)
    if loop is None or any(_mentions_aux_layers(s) for s in forward.body if s.lineno > (loop.end_lineno or 0)):
        return None
    index = loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
    tests = [s for s in loop.body if isinstance(s, ast.If) and _mentions_aux_layers(s.test)]
    at_the_top = [
        s
        for s in tests
        if isinstance(s.test, ast.Compare)
        and isinstance(s.test.ops[0], ast.In)
        and isinstance(s.test.left, ast.Name)
        and isinstance(index, ast.Name)
        and s.test.left.id == index.id
    ]
    return at_the_top[0].lineno if at_the_top and len(at_the_top) == len(tests) else None


def _decoder_forward(
    reader: ChainReader, read: ReadFile, module: str, cls: str, registry: Mapping[str, tuple[str, str]]
) -> Optional[tuple[str, ast.FunctionDef]]:
    """The file and the ``forward`` of the decoder that collects aux states for a registered class."""
    decoder = collecting_decoder(reader, module, cls, registry)
    if decoder is None:
        return None
    path = path_of(decoder.module)
    try:
        tree = ast.parse(read(path) or "")
    except SyntaxError:
        return None
    klass = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == decoder.name), None)
    body = klass.body if klass is not None else []
    forward = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    return (path, forward) if forward is not None else None


def collecting_decoder(
    reader: ChainReader, module: str, cls: str, registry: Mapping[str, tuple[str, str]]
) -> Optional[ClassInfo]:
    """The class whose ``forward`` collects aux states, on the registered class's chain or held by it (its
    ``self.model``, a multimodal class's language model built by the registry, and its model), breadth first."""
    start = reader.registered(module, cls)
    pending = list(start.classes) if start is not None else []
    seen: set[tuple[str, str]] = set()
    while pending and len(seen) < 32:
        info = pending.pop(0)
        if (info.module, info.name) in seen:
            continue
        seen.add((info.module, info.name))
        if info.collects:
            return info
        for _, held in info.holds:
            found = reader.resolve(info.module, held)
            chain = reader.chain(found.module, found.name) if found is not None else None
            pending.extend(chain.classes if chain is not None else ())
        for _, architectures in info.registered:
            chains = [reader.registered(*registry[a]) for a in architectures if a in registry]
            pending.extend(c for chain in chains if chain is not None for c in chain.classes)
    return None


def _capture_of_none(forward: ast.FunctionDef) -> Optional[int]:
    """The line of a capture in ``forward``'s decoder loop that adds a name the function binds to ``None`` before
    the loop and the loop has not rebound yet (unconditionally) when it captures."""
    loop = next((s for s in ast.walk(forward) if isinstance(s, ast.For) and _mentions_aux_layers(s)), None)
    if loop is None:
        return None
    none_before = {
        target.id
        for node in ast.walk(forward)
        if isinstance(node, ast.Assign) and node.lineno < loop.lineno and _is_none(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    rebound: set[str] = set()
    for statement in loop.body:
        if isinstance(statement, ast.If) and _mentions_aux_layers(statement.test):
            added = {
                operand.id
                for node in ast.walk(statement)
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                for operand in (node.left, node.right)
                if isinstance(operand, ast.Name)
            }
            guarded = {  # hidden_states if residual is None else hidden_states + residual
                n.left.id
                for n in ast.walk(statement)
                if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and _is_none(n.comparators[0])
            }
            trapped = (added & none_before) - rebound - guarded
            if trapped:
                return statement.lineno
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            rebound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return None


def _mentions_aux_layers(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "aux_hidden_state_layers" for n in ast.walk(node))


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
