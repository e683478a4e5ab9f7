"""Small LibCST helpers the codemods in ``patches/`` share.

They find things by structure (a class by name, a method in it, a call's callee) and
raise :class:`Unrecognised` with what was expected when the structure is not there, so a
codemod reads as a list of steps and every refusal names what it missed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from contextlib import contextmanager, nullcontext
from functools import cache, lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, TypeVar, Union

from .patch import MARKER, Unrecognised

MARK = f"# {MARKER}"
"""The trailing comment put on every line this tool adds or changes."""


def import_lazily(name: str) -> ModuleType:
    """``name`` as a module that is really imported on first attribute access.

    Importing LibCST takes about 0.2 s, and ``status`` on a patched tree (the health
    check) needs none of it: the hashes answer.  The recipe is the one in the
    ``importlib`` documentation.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, f"{name} is not installed"
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import libcst as cst
    from typing_extensions import TypeGuard  # typing's from Python 3.10; only read by the type checker
else:
    cst = import_lazily("libcst")
"""LibCST, for this module and the patch modules (``from vllm_eagle3_patch.codemod.cst_tools import cst``)."""


def import_libcst_now() -> None:
    """Import LibCST here and now, where :data:`cst` would import it on first use: a process about to fork
    its judges imports it once for both (``plan.py``)."""
    cst.parse_module("")  # its native parser too


Found = TypeVar("Found")
Node = TypeVar("Node", bound="cst.CSTNode")
Statement = TypeVar("Statement", bound="cst.BaseStatement")
Line = TypeVar("Line", bound="cst.SimpleStatementLine")
Parent = TypeVar("Parent", "cst.Module", "cst.ClassDef")
CommaItem = TypeVar("CommaItem", "cst.Arg", "cst.Element", "cst.ImportAlias")


def parse(source: str) -> cst.Module:
    """``source``'s tree, built by LibCST's parser without checking each node again as it is built (see
    :func:`trusting_the_parser`); the nodes a codemod builds are checked as ever."""
    try:
        with trusting_the_parser():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise Unrecognised(f"not valid Python ({error.message}, line {error.raw_line})") from None


@contextmanager
def trusting_the_parser() -> Iterator[None]:
    """Nodes built in the body skip ``CSTNode.__post_init__``, which only validates the node.

    The parser builds nothing invalid, yet each of the some 400,000 nodes ``apply`` parses is validated as
    it is built: a tenth of the command's CPU.  LibCST's own comment on ``__post_init__`` calls this work
    avoidable when parsing.  The check comes back when the body ends (one thread: nothing else builds nodes
    meanwhile), and the patched text is compiled before it is written, whatever happens here.
    """
    node = cst.CSTNode
    validate = vars(node).get("__post_init__")
    if validate is None:  # a LibCST that validates elsewhere: nothing to set aside
        yield
        return
    _validate_with(_built_by_the_parser)
    try:
        yield
    finally:
        _validate_with(validate)


def written(module: cst.Module) -> str:
    """``module.code``.  LibCST's writer enters ``CodegenState.record_syntactic_position`` at every node, a
    generator-based context manager that does nothing unless positions are asked for (its subclass that records
    them overrides it); one shared empty context stands in while the module is written: a third of the writing.
    """
    state = getattr(sys.modules.get("libcst._nodes.internal"), "CodegenState", None)
    record = vars(state).get("record_syntactic_position") if state is not None else None
    if record is None:  # a LibCST written otherwise: nothing to stand in for
        return module.code
    state.record_syntactic_position = _no_position  # type: ignore[union-attr]  # LibCST's own hook, swapped on purpose
    try:
        return module.code
    finally:
        state.record_syntactic_position = record  # type: ignore[union-attr]


_NO_POSITION = nullcontext()


def _no_position(self: object, node: object, *, start_node: object = None, end_node: object = None) -> nullcontext:
    return _NO_POSITION


def _validate_with(check: Callable[..., None]) -> None:
    cst.CSTNode.__post_init__ = check  # type: ignore[method-assign]  # LibCST's own hook, swapped on purpose


def _built_by_the_parser(self: cst.CSTNode) -> None:
    """What a node checks of itself while :func:`trusting_the_parser` holds: nothing."""


def walk(node: cst.CSTNode, into: Callable[[cst.CSTNode], bool] = lambda _: True) -> Iterator[cst.CSTNode]:
    """``node`` and every node under it, in source order; ``into`` says which nodes to enter.

    A plain walk over the nodes' fields.  LibCST's visitors and ``libcst.matchers`` do the
    same with far more machinery: importing the matchers alone costs a quarter second,
    more than the rest of ``status``.
    """
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if into(current):
            stack.extend(reversed(_children(current)))


@cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(kind))


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    children: list[cst.CSTNode] = []
    for name in _field_names(type(node)):
        value = getattr(node, name)
        if _is_node(value.__class__):
            children.append(value)
        elif isinstance(value, (list, tuple)):
            children.extend(item for item in value if _is_node(item.__class__))
    return children


@cache
def _is_node(kind: type) -> bool:
    """``issubclass(kind, CSTNode)``, once per type: ``CSTNode`` is an abstract base class, whose ``isinstance``
    takes the slow path, and a walk asks it of every field of every node."""
    return issubclass(kind, cst.CSTNode)


def find(node: cst.CSTNode, kind: type[Node], where: Callable[[Node], bool] = lambda _: True) -> list[Node]:
    """Every ``kind`` node under ``node`` (itself included) for which ``where`` holds.  A statement is looked for
    among statements only: none lies inside an expression, which hold most of a tree's nodes, and no line or block
    (``if``...) inside a line's small statements."""
    return [n for n in walk(node, _entered_looking_for(kind)) if isinstance(n, kind) and where(n)]


@cache
def _entered_looking_for(kind: type) -> Callable[[cst.CSTNode], bool]:
    """Which nodes a walk for ``kind`` needs to enter."""
    if issubclass(kind, cst.BaseStatement):
        return lambda n: not isinstance(n, (cst.BaseExpression, cst.SimpleStatementLine))
    if issubclass(kind, cst.BaseSmallStatement):
        return lambda n: not isinstance(n, cst.BaseExpression)
    return lambda _: True


def sole(items: Sequence[Found]) -> Optional[Found]:
    """The single item of ``items``, or None when there are none or several."""
    return items[0] if len(items) == 1 else None


def sole_statement(line: cst.CSTNode) -> Optional[cst.BaseSmallStatement]:
    """The statement of a line holding exactly one (``x = 1``, not ``x = 1; y = 2``)."""
    return sole(line.body) if isinstance(line, cst.SimpleStatementLine) else None


def assigned(statement: Optional[cst.CSTNode]) -> Optional[cst.BaseAssignTargetExpression]:
    """The target of ``target = value`` (or ``target: annotation = value``) with exactly one target, or None."""
    found = assignment(statement)
    return found[0] if found is not None else None


def assignment(
    statement: Optional[cst.CSTNode],
) -> Optional[tuple[cst.BaseAssignTargetExpression, cst.BaseExpression]]:
    """``(target, value)`` of ``target = value`` (or ``target: annotation = value``) with exactly one target, or
    None: ``target, value = assignment(statement) or (None, None)``."""
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
        return statement.targets[0].target, statement.value
    if isinstance(statement, cst.AnnAssign) and statement.value is not None:
        return statement.target, statement.value
    return None


def leading_lines(statement: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The blank lines and comments above ``statement``."""
    assert isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement))  # LibCST's two kinds
    return statement.leading_lines


def assigns_self_attribute(function: cst.FunctionDef, name: str) -> bool:
    """Whether ``function`` assigns ``self.<name>``, alone, annotated or in a tuple
    (``self.start_layer, self.end_layer, self.layers = make_layers(...)``)."""
    for line in find(function, cst.SimpleStatementLine):
        for statement in line.body:
            targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else []
            targets += [statement.target] if isinstance(statement, cst.AnnAssign) else []
            elements = [e for t in targets for e in (t.elements if isinstance(t, cst.Tuple) else [cst.Element(t)])]
            unpacked = [element.value for element in elements]
            if any(is_self_attribute(target, name) for target in unpacked):
                return True
    return False


def is_name(node: Optional[cst.CSTNode], *names: str) -> TypeGuard[cst.Name]:
    """A bare name, one of ``names`` when they are given."""
    return isinstance(node, cst.Name) and (not names or node.value in names)


def is_attribute(node: Optional[cst.CSTNode], attr: str) -> TypeGuard[cst.Attribute]:
    """``<anything>.<attr>``"""
    return isinstance(node, cst.Attribute) and node.attr.value == attr


def is_string(node: Optional[cst.CSTNode], value: str) -> TypeGuard[cst.SimpleString]:
    """A plain string literal whose value is ``value``, in whatever quotes."""
    return isinstance(node, cst.SimpleString) and node.evaluated_value == value


def has_mark(source: str) -> bool:
    """Whether this tool's marker comment is in ``source`` (cheap, no parsing)."""
    return MARK in source


def exactly_one(found: Sequence[Found], what: str) -> Found:
    """The single item in ``found``; zero or several is a file we do not recognise."""
    if len(found) == 1:
        return found[0]
    if not found:
        raise Unrecognised(f"expected {what}, found none")
    raise Unrecognised(f"expected one {what}, found {len(found)}")


def top_level_class(module: cst.Module, name: str) -> cst.ClassDef:
    classes = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    return exactly_one(classes, f"class {name}")


def method(cls: cst.ClassDef, name: str) -> cst.FunctionDef:
    methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return exactly_one(methods, f"method {cls.name.value}.{name}")


def has_method(cls: cst.ClassDef, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in cls.body.body)


def block_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of an indented block; none in a one-line body (``def f(): return x``), whose small statements
    stand on the header's line."""
    return list(suite.body) if isinstance(suite, cst.IndentedBlock) else []


def statements(code: str, module: cst.Module) -> list[cst.BaseStatement]:
    """Parse ``code`` (dedented statements) as statements fitting ``module``'s style (what its
    ``config_for_parsing`` holds, asked of the parser only where ``code`` was not parsed yet in that style: building
    that config checks a Python version each time, which cost more than the parse saved)."""
    newline = module.default_newline
    return list(_parsed(code.replace("\n", newline), module.encoding, module.default_indent, newline))


@lru_cache(maxsize=256)
def _parsed(code: str, encoding: str, indent: str, newline: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of ``code``, parsed once: most files of a release get the same methods, and parsing
    them is a fifth of ``apply``.  LibCST's nodes are immutable, so trees may share them; this tool's
    identity-based edits (:func:`replace_node`) only ever look for nodes of the file being patched."""
    config = cst.PartialParserConfig(encoding=encoding, default_indent=indent, default_newline=newline)
    return tuple(cst.parse_module(code, config=config).body)


def mark_header(block: cst.BaseSuite) -> cst.IndentedBlock:
    """Put the marker comment on a compound statement's header line (``for ...:  # mark``)."""
    assert isinstance(block, cst.IndentedBlock), "a compound statement on one line has no header line of its own"
    return block.with_changes(header=_marked(block.header))


def mark_line(line: Line) -> Line:
    """Put the marker comment at the end of a simple statement's (last) line."""
    return line.with_changes(trailing_whitespace=_marked(line.trailing_whitespace))


def mark(statement: Statement) -> Statement:
    """Mark a simple statement's line or a compound statement's header."""
    if isinstance(statement, cst.SimpleStatementLine):
        return mark_line(statement)
    assert isinstance(statement, cst.BaseCompoundStatement)  # the other kind of statement LibCST has
    return statement.with_changes(body=mark_header(statement.body))


def add_base(cls: cst.ClassDef, base: str) -> cst.ClassDef:
    """Append ``base`` to the class's bases (unless it is there) and mark the class line."""
    if any(is_name(arg.value, base) for arg in cls.bases):
        return cls
    return cls.with_changes(bases=append_items(cls.bases, [cst.Arg(cst.Name(base))]), body=mark_header(cls.body))


def add_methods(cls: cst.ClassDef, code: str, module: cst.Module) -> cst.ClassDef:
    """Append the methods in ``code`` to the class body, each after a blank line and marked."""
    methods = [mark(s).with_changes(leading_lines=[cst.EmptyLine(indent=False)]) for s in statements(code, module)]
    return cls.with_changes(body=cls.body.with_changes(body=[*cls.body.body, *methods]))


def _marked(trailing: cst.TrailingWhitespace) -> cst.TrailingWhitespace:
    if trailing.comment is not None:
        return trailing.with_changes(comment=cst.Comment(f"{trailing.comment.value}  {MARK}"))
    return trailing.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(MARK))


def append_items(items: Sequence[CommaItem], new: Sequence[CommaItem]) -> list[CommaItem]:
    """Append ``new`` to a comma-separated list, keeping its layout.

    One-line lists get ``", "``; a list laid out one item per line (the item before the
    last ends in a comma followed by a newline) gets the same layout for the new items,
    and keeps a trailing comma if it had one.
    """
    if not new:
        return list(items)
    if not items:
        return _with_commas(list(new), cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), None)
    head, last = list(items[:-1]), items[-1]  # not `*head, last = items` (nor `[*a, *b]`): mypy loses the item type
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    between = head[-1].comma if head and isinstance(head[-1].comma, cst.Comma) else None
    if between is None or (trailing is None and not _spans_lines(between)):
        between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return head + _with_commas([last] + list(new), between, trailing)


def _with_commas(items: list[CommaItem], between: cst.Comma, trailing: Optional[cst.Comma]) -> list[CommaItem]:
    result = [item.with_changes(comma=between) for item in items[:-1]]
    last_comma: Union[cst.Comma, cst.MaybeSentinel] = trailing if trailing is not None else cst.MaybeSentinel.DEFAULT
    return result + [items[-1].with_changes(comma=last_comma)]


def _spans_lines(comma: cst.Comma) -> bool:
    return isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


def is_self_attribute(node: Optional[cst.CSTNode], name: str) -> TypeGuard[cst.Attribute]:
    """``self.<name>``"""
    return is_attribute(node, name) and is_name(node.value, "self")


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier used in ``node``: new names must not shadow any of them."""
    return {n.value for n in find(node, cst.Name)}


def replace_child(parent: Parent, old: cst.CSTNode, new: cst.CSTNode) -> Parent:
    """Swap one statement of a module or a class body (found by identity) for ``new``.

    Cheaper than ``deep_replace``, which walks and rebuilds the whole tree.
    """
    if isinstance(parent, cst.Module):
        return parent.with_changes(body=[new if s is old else s for s in parent.body])
    body = parent.body.with_changes(body=[new if s is old else s for s in parent.body.body])
    return parent.with_changes(body=body)


def replace_node(root: Node, old: cst.CSTNode, new: cst.CSTNode) -> Node:
    """``root`` with ``old`` (found by identity anywhere under it) swapped for ``new``.

    Rebuilds only the nodes on the way down to ``old``; ``deep_replace`` rebuilds them all.
    """
    path = _path_to(root, old)
    if not path:
        raise ValueError("replace_node: the node to replace is not under the root")
    for parent in reversed(path[:-1]):
        new, old = _with_child(parent, old, new), parent
    return new  # type: ignore[return-value]  # root rebuilt by with_changes, its own kind (or `new`: root is old)


def _path_to(node: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from ``node`` down to ``target``, both included (empty: not under it)."""
    if node is target:
        return [node]
    for child in _children(node):
        path = _path_to(child, target)
        if path:
            return [node, *path]
    return []


def _with_child(parent: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    for field in dataclasses.fields(parent):
        value = getattr(parent, field.name)
        if value is old:
            return parent.with_changes(**{field.name: new})
        if isinstance(value, (list, tuple)) and any(item is old for item in value):
            return parent.with_changes(**{field.name: [new if item is old else item for item in value]})
    raise ValueError("replace_node: not a child")


def add_import(tree: cst.Module, module: str, name: str, package: str) -> cst.Module:
    """Make ``from <module> import <name>`` hold at the top of ``tree``, and mark that line.

    An existing ``from <module> import ...`` (absolute, or relative to ``package``) gains
    the name in its own layout (one line, or one name per line with a trailing comma);
    without one, a new line follows the last import at the top of the file.  What LibCST's
    ``AddImportsVisitor`` does for these shapes, without importing ``libcst.codemod``
    and ``libcst.matchers`` (see :class:`~vllm_eagle3_patch.codemod.judge.ModuleCodemod`).
    """
    head = _header(tree)
    for index, line in enumerate(head):
        statement = sole_statement(line)
        if not isinstance(statement, cst.ImportFrom) or _imported_module(statement, package) != module:
            continue
        if isinstance(statement.names, cst.ImportStar) or _imports_name(line, name):
            return tree
        names = append_items(statement.names, [cst.ImportAlias(cst.Name(name))])
        head[index] = mark_line(line.with_changes(body=[statement.with_changes(names=names)]))
        return tree.with_changes(body=[*head, *tree.body[len(head) :]])
    (new_line,) = statements(f"from {module} import {name}\n", tree)
    at = _after_imports(head)
    return tree.with_changes(body=[*head[:at], mark(new_line), *tree.body[at:]])


def _header(tree: cst.Module) -> list[cst.SimpleStatementLine]:
    """The simple statements (docstring, imports, constants) that open the module."""
    head = []
    for line in tree.body:
        if not isinstance(line, cst.SimpleStatementLine):
            break
        head.append(line)
    return head


def _imported_module(statement: cst.ImportFrom, package: str) -> str:
    """The absolute name of the module a ``from ... import`` reads (``.interfaces`` -> ``<package>.interfaces``)."""
    from libcst.helpers import get_full_name_for_node  # LibCST's own; imports no matchers

    name = get_full_name_for_node(statement.module) if statement.module is not None else None
    if not statement.relative:
        return name or ""
    parts = package.split(".")
    base = parts[: len(parts) - len(statement.relative) + 1]  # one dot: the package itself
    return ".".join([*base, name] if name else base)


def _after_imports(head: list[cst.SimpleStatementLine]) -> int:
    """Where a new import goes: after the last one at the top, else after the docstring."""
    imports = [i for i, line in enumerate(head) if isinstance(sole_statement(line), (cst.Import, cst.ImportFrom))]
    if imports:
        return imports[-1] + 1
    first = sole_statement(head[0]) if head else None
    return 1 if isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString) else 0


def _imports_name(line: cst.BaseStatement, name: str) -> bool:
    """``from ... import a, <name>, b`` (one statement on the line)."""
    statement = sole_statement(line)
    return (
        isinstance(statement, cst.ImportFrom)
        and not isinstance(statement.names, cst.ImportStar)
        and any(is_name(alias.name, name) for alias in statement.names)
    )
