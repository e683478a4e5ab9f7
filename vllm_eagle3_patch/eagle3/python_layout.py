"""Where each module-level statement of a Python file lies, and each statement of its classes' bodies.

The outline (``codemod/outline.py``) sets aside the bodies a codemod does not read, and the decoder codemod reads
a class or two with the standard library's parser: both need these lines, not the file's tree.  Finding the
families by rule (``eagle3/class_chain.py``) parses every model file anyway, so it keeps each file's layout in
the release's :class:`Layouts`, and judging the file (in the same process or a fork) does not parse it again.
"""

from __future__ import annotations

import ast
import hashlib
import re
import warnings
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n)|[^\r\n]+$")


class FunctionSpan(NamedTuple):
    """A module-level function or a method of a module-level class (tuples: a layout crosses processes)."""

    cls: Optional[str]
    name: str
    line: int
    """The ``def`` line; decorators come before it."""
    column: int
    last: int
    decorators: tuple[tuple[int, int], ...]
    """``(line, column)`` of each decorator expression."""
    body: tuple[int, int]
    """``(line, column)`` of the first statement of the body."""
    statements: tuple[StatementSpan, ...] = ()
    """Of an ``__init__``, the statements of its body (a class in it is one too); () for other functions: of a
    class's constructor a codemod reads a few lines (``outline``'s ``reads_statement``), of the others all or none."""

    @property
    def first(self) -> int:
        """The first line, decorators included."""
        return min((line for line, _ in self.decorators), default=self.line)


class StatementSpan(NamedTuple):
    """Any other statement of the module or of a class body: an import, an assignment, a docstring..."""

    first: int
    """The first line, decorators included (a class in a class)."""
    column: int
    """Where it starts on that line (a decorator's expression, just after its ``@``)."""
    last: int
    kind: str
    """``import`` (``import``/``from ... import``), ``docstring`` (a string first in its body), ``compound`` (``if``,
    ``try``, a class in a class...) or ``other``."""


class ClassSpan(NamedTuple):
    name: str
    first: int
    """The first line, decorators included."""
    last: int
    body: tuple[Union[FunctionSpan, StatementSpan], ...]
    """Its methods and other statements, in source order."""

    @property
    def methods(self) -> tuple[FunctionSpan, ...]:
        return tuple(span for span in self.body if isinstance(span, FunctionSpan))


Span = Union[FunctionSpan, ClassSpan, StatementSpan]
Layout = tuple[Span, ...]
"""A file's module-level statements, in source order."""


def python_tree(source: str) -> ast.Module:
    """The standard library's tree of ``source``; raises ``SyntaxError`` or ``ValueError`` where it has none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes etc. are vLLM's business, not ours
        return ast.parse(source)


def source_lines(source: str) -> list[str]:
    """``source``'s lines, each with its line end, numbered as the layout numbers them (from 1) where ``source``
    has no lone ``\\r``: the standard library ends a line there too."""
    return _LINE.findall(source)


def class_tree(lines: list[str], span: ClassSpan) -> ast.ClassDef:
    """The standard library's tree of one module-level class, parsed alone: a file's other classes unread."""
    cls = python_tree("".join(lines[span.first - 1 : span.last])).body[0]
    assert isinstance(cls, ast.ClassDef), span.name
    return cls


def layout_of(tree: ast.Module) -> Layout:
    spans: list[Span] = []
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ClassDef):
            body = tuple(_span(node.name, i, child) for i, child in enumerate(node.body))
            first = min((d.lineno for d in node.decorator_list), default=node.lineno)
            spans.append(ClassSpan(node.name, first, node.end_lineno or node.lineno, body))
        else:
            spans.append(_span(None, index, node))
    return tuple(spans)


def _span(cls: Optional[str], index: int, node: ast.stmt) -> Union[FunctionSpan, StatementSpan]:
    """A function's span, or any other statement's (a class in a class is one of those: compound, always kept)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _function(cls, node)
    return _statement(node, index)


def _statement(node: ast.stmt, index: int) -> StatementSpan:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        kind = "import"
    elif index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        kind = "docstring" if isinstance(node.value.value, str) else "other"
    else:
        kind = "compound" if hasattr(node, "body") or hasattr(node, "cases") else "other"  # match: cases
    first = min(((d.lineno, d.col_offset) for d in getattr(node, "decorator_list", ())), default=None)
    line, column = first or (node.lineno, node.col_offset)
    return StatementSpan(line, column, node.end_lineno or node.lineno, kind)


def _function(cls: Optional[str], node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> FunctionSpan:
    decorators = tuple((d.lineno, d.col_offset) for d in node.decorator_list)
    body = (node.body[0].lineno, node.body[0].col_offset)
    statements = tuple(_statement(child, i) for i, child in enumerate(node.body)) if node.name == "__init__" else ()
    last = node.end_lineno or node.lineno
    return FunctionSpan(cls, node.name, node.lineno, node.col_offset, last, decorators, body, statements)


class Layouts:
    """Layouts by source text, kept for one command: a file read by discovery is laid out once.  ``kept`` loads
    the layouts an earlier command found, by the digest of their source (``verdict_cache.LayoutFile``): where
    discovery's answer comes from the cache, ``apply`` lays out no file it judges again."""

    def __init__(self, kept: Callable[[], Mapping[str, list]] = dict) -> None:
        self._by_source: dict[str, Optional[Layout]] = {}
        self._load_kept = kept
        self._kept: Optional[Mapping[str, list]] = None
        self._found: set[str] = set()
        """The sources laid out in this command: parsed here, or by discovery (:meth:`remember`)."""

    def of(self, source: str) -> Optional[Layout]:
        """``source``'s layout; None where the standard library cannot parse it."""
        if source not in self._by_source:
            encoded = self._kept_layouts().get(source_digest(source))
            if encoded is not None:
                self._by_source[source] = tuple(_decoded(span) for span in encoded)
                return self._by_source[source]
            try:
                self._by_source[source] = layout_of(python_tree(source))
            except (SyntaxError, ValueError):
                self._by_source[source] = None
            self._found.add(source)
        return self._by_source[source]

    def remember(self, source: str, layout: Optional[Layout]) -> None:
        self._by_source[source] = layout
        self._found.add(source)

    def to_keep(self) -> Optional[dict[str, list]]:
        """The layouts kept and those found in this command, by source digest, as JSON lists; None where none
        was found that was not kept already."""
        if not self._found:
            return None
        kept = self._kept_layouts()
        found = {source_digest(source): self._by_source[source] for source in self._found}
        new = {digest: [_encoded(span) for span in layout] for digest, layout in found.items() if layout}
        return {**kept, **new} if any(digest not in kept for digest in new) else None

    def _kept_layouts(self) -> Mapping[str, list]:
        if self._kept is None:
            self._kept = self._load_kept()
        return self._kept


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _encoded(span: Span) -> list:
    if isinstance(span, ClassSpan):
        return ["class", span.name, span.first, span.last, [_encoded(s) for s in span.body]]
    if isinstance(span, FunctionSpan):
        statements = [_encoded(s) for s in span.statements]
        return ["def", span.cls, span.name, span.line, span.column, span.last, span.decorators, span.body, statements]
    return ["statement", *span]


def _decoded(data: list) -> Any:
    kind, *fields = data
    if kind == "class":
        name, first, last, body = fields
        return ClassSpan(name, first, last, tuple(_decoded(s) for s in body))
    if kind == "def":
        cls, name, line, column, last, decorators, body, statements = fields
        decorated = tuple(tuple(d) for d in decorators)
        kept = tuple(_decoded(s) for s in statements)
        return FunctionSpan(cls, name, line, column, last, decorated, tuple(body), kept)
    return StatementSpan(*fields)
