"""A speculators-format drafter config as this release's vLLM converts it, so ``doctor`` checks what vLLM loads.

speculators (vLLM's drafter-training library) writes ``speculators_model_type`` and keeps the layer's shape under
``transformer_layer_config``; vLLM turns that into the config it loads with one small function per type
(``@register_speculator("eagle3")`` in ``transformers_utils/configs/speculators/algos.py``): start from
``transformer_layer_config``, copy some top-level fields, set ``architectures``.  Those functions change between
releases (0.34.0 picks the class by the layer's ``model_type``), so they are read from the tree and evaluated here
on the config, never imported.  What the evaluator does not follow leaves the config unconverted: ``doctor`` then
says it cannot check it, as before.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from ..eagle3.release import Release
from .drafter_config import ModelConfig

TYPE_FIELD = "speculators_model_type"
LAYER_FIELD = "transformer_layer_config"
REGISTERS = "@register_speculator("
"""How the release's conversion names each type's function (found by a search of the tree)."""


class _NotFollowed(Exception):
    """A statement or an expression the evaluator does not follow."""


def as_vllm_loads(config: ModelConfig, release: Release) -> ModelConfig:
    """``config`` converted as the release converts a speculators-format config; unchanged where it is not one, or
    where the release's conversion of its type cannot be followed."""
    kind, layer = config.data.get(TYPE_FIELD), config.data.get(LAYER_FIELD)
    if not isinstance(kind, str) or not isinstance(layer, dict):
        return config
    function = _conversion(release, kind)
    if function is None:
        return config
    converted = dict(layer)
    try:
        _run(function.body, {"config_dict": config.data, "pre_trained_config": converted})
    except _NotFollowed:
        return config
    return ModelConfig(config.path, converted)


def _conversion(release: Release, kind: str) -> Optional[ast.FunctionDef]:
    """The release's function registered for ``kind``, with the parameter names it was written with replaced by
    the two this evaluator binds (its first parameter is the speculators config, its second the one it builds)."""
    for path in release.tree.search(REGISTERS):
        try:
            tree = ast.parse(release.read(path) or "")
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_registers(d, kind) for d in node.decorator_list):
                names = [a.arg for a in node.args.args]
                if len(names) != 2:
                    return None
                renamed = {names[0]: "config_dict", names[1]: "pre_trained_config"}
                for name in ast.walk(node):
                    if isinstance(name, ast.Name) and name.id in renamed:
                        name.id = renamed[name.id]
                return node
    return None


def _registers(decorator: ast.expr, kind: str) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Name)
        and decorator.func.id == "register_speculator"
        and bool(decorator.args)
        and isinstance(decorator.args[0], ast.Constant)
        and decorator.args[0].value == kind
    )


def _run(statements: list[ast.stmt], names: dict[str, Any]) -> None:
    for statement in statements:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], _value(statement.value, names)
            if isinstance(target, ast.Name):
                names[target.id] = value
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                _mapping(target.value.id, names)[_value(target.slice, names)] = value
            else:
                raise _NotFollowed
        elif isinstance(statement, ast.If):
            _run(statement.body if _value(statement.test, names) else statement.orelse, names)
        else:  # a raise (an unsupported layer type), a loop, a call: not followed
            raise _NotFollowed


def _mapping(name: str, names: dict[str, Any]) -> dict:
    found = names.get(name)
    if not isinstance(found, dict):
        raise _NotFollowed
    return found


def _value(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, names) for e in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        try:
            return _mapping(node.value.id, names)[_value(node.slice, names)]
        except (KeyError, TypeError):
            raise _NotFollowed from None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and 1 <= len(node.args) <= 2
    ):
        default = _value(node.args[1], names) if len(node.args) == 2 else None
        return _mapping(node.func.value.id, names).get(_value(node.args[0], names), default)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _value(node.left, names), _value(node.comparators[0], names)
        return _compared(node.ops[0], left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _value(node.operand, names)
    if isinstance(node, ast.BoolOp):
        values = [_value(v, names) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    raise _NotFollowed


def _compared(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.Eq):
        return bool(left == right)
    if isinstance(op, ast.NotEq):
        return bool(left != right)
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (dict, list, str)):
        return (left in right) == isinstance(op, ast.In)
    raise _NotFollowed
