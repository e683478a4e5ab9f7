"""Small LibCST helpers the codemods in ``patches/`` share.

They find things by structure (a class by name, a method in it, a call's callee) and
raise :class:`Unrecognised` with what was expected when the structure is not there, so a
codemod reads as a list of steps and every refusal names what it missed.
"""

from __future__ import annotations

from typing import Optional, Sequence, TypeVar, Union

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from .target import MARKER, Unrecognised

MARK = f"# {MARKER}"
"""The trailing comment put on every line this tool adds or changes."""

Found = TypeVar("Found")
Parent = TypeVar("Parent", cst.Module, cst.ClassDef)
CommaItem = TypeVar("CommaItem", cst.Arg, cst.Element, cst.ImportAlias)


def parse(source: str) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise Unrecognised(f"not valid Python ({error.message}, line {error.raw_line})") from None


def has_mark(source: str) -> bool:
    """Whether this tool's marker comment is in ``source`` (cheap, no parsing)."""
    return MARK in source


def only(found: Sequence[Found], what: str) -> Found:
    """The single item in ``found``; zero or several is a file we do not recognise."""
    if len(found) == 1:
        return found[0]
    if not found:
        raise Unrecognised(f"expected {what}, found none")
    raise Unrecognised(f"expected one {what}, found {len(found)}")


def top_level_class(module: cst.Module, name: str) -> cst.ClassDef:
    classes = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    return only(classes, f"class {name}")  # type: ignore[return-value]


def method(cls: cst.ClassDef, name: str) -> cst.FunctionDef:
    methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return only(methods, f"method {cls.name.value}.{name}")  # type: ignore[return-value]


def has_method(cls: cst.ClassDef, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in cls.body.body)


def statements(code: str, module: cst.Module) -> list[cst.BaseStatement]:
    """Parse ``code`` (dedented statements) as statements fitting ``module``'s style."""
    parsed = cst.parse_module(code.replace("\n", module.default_newline), config=module.config_for_parsing)
    return list(parsed.body)


def mark_header(block: cst.IndentedBlock) -> cst.IndentedBlock:
    """Put the marker comment on a compound statement's header line (``for ...:  # mark``)."""
    return block.with_changes(header=_marked(block.header))


def mark_line(line: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """Put the marker comment at the end of a simple statement's (last) line."""
    return line.with_changes(trailing_whitespace=_marked(line.trailing_whitespace))


def mark(statement: cst.BaseStatement) -> cst.BaseStatement:
    """Mark a simple statement's line or a compound statement's header."""
    if isinstance(statement, cst.SimpleStatementLine):
        return mark_line(statement)
    return statement.with_changes(body=mark_header(statement.body))  # type: ignore[attr-defined]


def add_base(cls: cst.ClassDef, base: str) -> cst.ClassDef:
    """Append ``base`` to the class's bases (unless it is there) and mark the class line."""
    if any(m.matches(arg.value, m.Name(base)) for arg in cls.bases):
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
    *head, last = items
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    between = head[-1].comma if head and isinstance(head[-1].comma, cst.Comma) else None
    if between is None or (trailing is None and not _spans_lines(between)):
        between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [*head, *_with_commas([last, *new], between, trailing)]


def _with_commas(items: list[CommaItem], between: cst.Comma, trailing: Optional[cst.Comma]) -> list[CommaItem]:
    result = [item.with_changes(comma=between) for item in items[:-1]]
    last_comma: Union[cst.Comma, cst.MaybeSentinel] = trailing if trailing is not None else cst.MaybeSentinel.DEFAULT
    return [*result, items[-1].with_changes(comma=last_comma)]


def _spans_lines(comma: cst.Comma) -> bool:
    return isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


def is_self_attribute(node: cst.BaseExpression, name: str) -> bool:
    """``self.<name>``"""
    return m.matches(node, m.Attribute(value=m.Name("self"), attr=m.Name(name)))


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier used in ``node``: new names must not shadow any of them."""
    return {n.value for n in m.findall(node, m.Name())}  # type: ignore[union-attr]


def replace_child(parent: Parent, old: cst.CSTNode, new: cst.CSTNode) -> Parent:
    """Swap one statement of a module or a class body (found by identity) for ``new``.

    Cheaper than ``deep_replace``, which walks and rebuilds the whole tree.
    """
    if isinstance(parent, cst.Module):
        return parent.with_changes(body=[new if s is old else s for s in parent.body])  # type: ignore[return-value]
    body = parent.body.with_changes(body=[new if s is old else s for s in parent.body.body])
    return parent.with_changes(body=body)  # type: ignore[return-value]


def add_import(
    tree: cst.Module, context: CodemodContext, module: str, name: str, relative: int = 0
) -> cst.Module:
    """Add ``from <module> import <name>`` with LibCST's ``AddImportsVisitor`` and mark that line.

    The visitor extends an existing import of the module whatever its shape.  It only
    ever touches the imports at the top of the file, so it runs on those statements
    alone: on a whole 1,500-line model file it would take seconds.
    """
    split = next((i for i, s in enumerate(tree.body) if not isinstance(s, cst.SimpleStatementLine)), len(tree.body))
    head = tree.with_changes(body=tree.body[:split], footer=())
    # A context of its own: a request left in the codemod's context would make
    # CodemodCommand run the visitor again, over the whole file.
    own = CodemodContext(full_module_name=context.full_module_name, full_package_name=context.full_package_name)
    AddImportsVisitor.add_needed_import(own, module, name, relative=relative)
    new_head = head.visit(AddImportsVisitor(own))
    alias = m.ImportAlias(name=m.Name(name))
    names_it = m.SimpleStatementLine(body=[m.ImportFrom(names=[m.ZeroOrMore(), alias, m.ZeroOrMore()])])
    body = [mark_line(s) if m.matches(s, names_it) else s for s in new_head.body]  # type: ignore[arg-type]
    return tree.with_changes(body=[*body, *tree.body[split:]])
