"""Which of a platform-split package's imports a CUDA process runs, read from the package's ``__init__``.

From 0.22.0 vLLM keeps some models in per-platform variants (``models/<name>/{nvidia,amd,cpu,xpu}/``) and the
package's ``__init__`` imports the class a platform needs: under ``if current_platform.is_rocm(): ... else: ...``,
``if TYPE_CHECKING or current_platform.is_cuda():``, or in a module ``__getattr__``.  A GPU user gets the class the
CUDA branch imports, so that is the class whose verdict decides; the guards are evaluated for CUDA with three values
(true, false, cannot tell), and a binding under a guard this module cannot read makes the answer "cannot tell".
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator, Optional

Binding = tuple[str, str]
"""``(module, name)`` an import binds a name to (``models.hy_v4.nvidia.model``, ``HYV4ForCausalLM``)."""
Resolve = Callable[[ast.ImportFrom], Optional[str]]
"""The module of ``vllm`` an import names (None: not one of vLLM's)."""

CUDA_CHECKS = ("is_cuda", "is_cuda_alike")
"""``current_platform`` checks a CUDA process passes; every other ``is_<platform>()`` it fails."""
CUDA_DEVICE = "cuda"
"""``current_platform.device_type`` in a CUDA process."""


def cuda_binding(tree: ast.Module, name: str, resolve: Resolve) -> Optional[Binding]:
    """What ``name`` is bound to in a CUDA process: the last import of it a CUDA process runs at module level, else
    (nothing bound there) the last one of a module ``__getattr__``; None where a guard cannot be read or none runs."""
    for scope in (tree.body, *_getattr_bodies(tree)):
        found: Optional[Binding] = None
        for binding, runs in _imports_of(scope, name, resolve, True):
            if runs is None:
                return None
            if runs:
                found = binding
        if found is not None:
            return found
    return None


def _getattr_bodies(tree: ast.Module) -> Iterator[list[ast.stmt]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            yield node.body


def _imports_of(
    body: list[ast.stmt], name: str, resolve: Resolve, runs: Optional[bool]
) -> Iterator[tuple[Binding, Optional[bool]]]:
    """Each import binding ``name`` in ``body``, with whether a CUDA process runs it (None: cannot tell)."""
    for statement in body:
        if isinstance(statement, ast.ImportFrom):
            module = resolve(statement)
            for alias in statement.names:
                if (alias.asname or alias.name) == name and module is not None:
                    yield (module, alias.name), runs
        elif isinstance(statement, ast.If):
            test = on_cuda(statement.test)
            yield from _imports_of(statement.body, name, resolve, _and(runs, test))
            yield from _imports_of(statement.orelse, name, resolve, _and(runs, _not(test)))
        elif isinstance(statement, ast.Try):
            yield from _imports_of(statement.body, name, resolve, runs)  # an import that fails on CUDA is a bug
            for handler in statement.handlers:
                yield from _imports_of(handler.body, name, resolve, _and(runs, False))
            yield from _imports_of(statement.orelse + statement.finalbody, name, resolve, runs)


def on_cuda(test: ast.expr) -> Optional[bool]:
    """``test`` evaluated in a CUDA process: ``TYPE_CHECKING`` is false, ``x.is_cuda()`` true, ``x.is_rocm()`` and
    every other ``is_<platform>()`` false, ``x.device_type == "cuda"`` true; None for anything else."""
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.args:
        attribute = test.func.attr
        if attribute.startswith("is_"):
            return attribute in CUDA_CHECKS
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Attribute) and left.attr == "device_type" and isinstance(right, ast.Constant):
            return (right.value == CUDA_DEVICE) is isinstance(test.ops[0], ast.Eq)
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _not(on_cuda(test.operand))
    if isinstance(test, ast.BoolOp):
        values = [on_cuda(value) for value in test.values]
        if isinstance(test.op, ast.Or):
            return True if True in values else (None if None in values else False)
        return False if False in values else (None if None in values else True)
    return None


def _not(value: Optional[bool]) -> Optional[bool]:
    return None if value is None else not value


def _and(left: Optional[bool], right: Optional[bool]) -> Optional[bool]:
    if left is False or right is False:
        return False
    return None if left is None or right is None else True
