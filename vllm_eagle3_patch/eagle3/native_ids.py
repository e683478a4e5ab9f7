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
from typing import Callable, Optional

from .class_chain import Chain
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
        return None if any(v is None for v in values) else tuple(values)  # type: ignore[arg-type]


def native_default(chain: Chain, read: ReadFile, getters: tuple[str, ...] = GETTERS) -> Optional[NativeDefault]:
    """The getter (the runner's, ``getters``) of the first class on ``chain`` that defines one, as written
    upstream (None: none readable)."""
    for cls in chain.classes:
        getter = next((name for name in getters if name in cls.methods), None)
        if getter is None:
            continue
        path = cls.module.replace(".", "/") + ".py"
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
