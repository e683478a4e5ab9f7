"""Run one method of a patched vLLM file without importing vLLM or torch.

The method is lifted out of its class with ``ast``, its annotations (which name torch
types) stripped, and executed with the globals the caller provides: enough to run the
patched control flow on plain Python values.
"""

from __future__ import annotations

import ast
from typing import Any, Callable


class _StripAnnotations(ast.NodeTransformer):
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        for arg in [*node.args.args, *node.args.kwonlyargs]:
            arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def lift_method(source: str, class_name: str, method_name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """``class_name.method_name`` from ``source`` as a plain function over ``namespace``."""
    tree = ast.parse(source.replace("\r\n", "\n").expandtabs(4))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    function = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method_name)
    module = ast.fix_missing_locations(ast.Module(body=[_StripAnnotations().visit(function)], type_ignores=[]))
    exec(compile(module, f"<{class_name}.{method_name}>", "exec"), namespace)  # noqa: S102 - the code under test
    return namespace[method_name]


class Number(float):
    """A plain number with ``clone()``: the patched captures copy a bare tensor (``hidden_states.clone()``)."""

    def clone(self) -> Number:
        return Number(self)
