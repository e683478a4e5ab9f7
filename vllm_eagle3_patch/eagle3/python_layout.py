"""Where each module-level statement of a Python file lies, and each statement of its classes' bodies.

The outline (``codemod/outline.py``) sets aside the bodies a codemod does not read, and the decoder codemod reads
a class or two with the standard library's parser: both need these lines, not the file's tree.  Finding the
families by rule (``eagle3/class_chain.py``) reads every model file anyway, so it keeps each file's layout in
the release's :class:`Layouts`, and judging the file (in the same process or a fork) does not lay it out again.

Most of a model file is classes nobody reads (its attention, its MLP...), so a file is first split where its
module-level classes start (:func:`split_module`, a scan of its lines in column 0 that tells a triple-quoted string
by its quotes): the rest of the file is parsed as one text with the classes' lines blanked, and a class only when
it is read (:func:`class_tree`).  Each class parsed alone must start and end where the split said, and the
blanked text's statements where the split said: where either is not so, the file is parsed whole.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import re
import warnings
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Union

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


ClassBody = tuple[Union[FunctionSpan, StatementSpan], ...]
"""A class's methods and other statements, in source order."""


class ClassSpan(NamedTuple):
    name: str
    first: int
    """The first line, decorators included."""
    last: int
    body: Optional[ClassBody]
    """Its methods and other statements, in source order; None where the class has not been parsed yet
    (:meth:`Layouts.body` parses it)."""


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
    lines = source.splitlines(keepends=True)  # fast, but it also ends a line at a form feed or a lone carriage return
    ends = source.count("\n") + (not source.endswith("\n") and bool(source))
    return lines if len(lines) == ends else _LINE.findall(source)


class MisSplit(SyntaxError):
    """A class parsed alone is not where :func:`split_module` put it: the file is to be parsed whole."""


def class_tree(lines: list[str], span: ClassSpan) -> ast.ClassDef:
    """The standard library's tree of one module-level class, parsed alone (its lines numbered as in the file): a
    file's other classes unread.  Raises :class:`MisSplit` where those lines are not that class, whole."""
    text = "\n" * (span.first - 1) + "".join(lines[span.first - 1 : span.last])
    try:
        body = python_tree(text).body
    except (SyntaxError, ValueError) as error:
        raise MisSplit(f"lines {span.first}-{span.last} are not a class: {error}") from None
    cls = body[0] if len(body) == 1 else None
    if not isinstance(cls, ast.ClassDef) or (cls.name, _first(cls), cls.end_lineno) != span[:3]:
        raise MisSplit(f"lines {span.first}-{span.last} are not class {span.name}")
    return cls


def class_body(cls: ast.ClassDef) -> ClassBody:
    """Where each statement of a class's body lies (``cls`` numbered as in its file)."""
    return tuple(_span(cls.name, i, child) for i, child in enumerate(cls.body))


class SplitModule(NamedTuple):
    """A file split at its module-level classes (:func:`split_module`)."""

    layout: Layout
    """The file's layout, every class's body unread (None)."""
    rest: ast.Module
    """The tree of everything but the classes (their lines blank): the imports, functions and assignments."""


_STATEMENT_START = re.compile(r"\n(?:(@)|(class[ \t]+(\w+))|((?:else|elif|except|finally)\b)|[^\s#)\]}])")
"""A line in column 0 that may start a module-level statement (the text searched starts with a line end): a
decorator, a class (its name), a clause of one (``else:``, which does not start one), or anything else but a
comment or a closing bracket."""
_TRIPLE_QUOTES = ('"""', "'''")


def split_module(source: str) -> Optional[SplitModule]:
    """``source`` split at its module-level classes, or None where the split is not sure (a line in column 0 within
    brackets, a lone ``\\r``...: the file is then parsed whole)."""
    if "\r" in source.replace("\r\n", ""):
        return None
    starts = _statement_starts(source)
    if starts is None:
        return None
    lines = source_lines(source)
    rest_lines = list(lines)
    classes: list[ClassSpan] = []
    for (first, name), (after, _) in zip(starts, [*starts[1:], (len(lines) + 1, None)]):
        if name is None:
            continue
        last = after - 1
        while last > first and (not lines[last - 1].strip() or lines[last - 1].lstrip().startswith("#")):
            last -= 1  # the blank lines and comments after the class
        classes.append(ClassSpan(name, first, last, None))
        rest_lines[first - 1 : after - 1] = ["\n"] * (after - first)
    try:
        rest = python_tree("".join(rest_lines))
    except (SyntaxError, ValueError):
        return None
    if list(dict.fromkeys(_first(node) for node in rest.body)) != [first for first, name in starts if name is None]:
        return None  # a statement the split did not see start, or one it saw that does not
    items: list[tuple[int, Union[ClassSpan, ast.stmt]]] = [
        *((s.first, s) for s in classes),
        *((_first(n), n) for n in rest.body),
    ]
    ordered = [item for _, item in sorted(items, key=_line)]
    layout = tuple(
        item if isinstance(item, ClassSpan) else _span(None, index, item) for index, item in enumerate(ordered)
    )
    return SplitModule(layout, rest)


def _statement_starts(source: str) -> Optional[list[tuple[int, Optional[str]]]]:
    """The lines where a module-level statement may start (a decorated one at its first decorator), each with the
    class's name where it is a class; None where a line in column 0 within a triple-quoted string lies in a class
    (a string the search may misread: the class would not be checked where it ends)."""
    strings = _triple_quoted(source)
    string_starts = [start for start, _ in strings]
    starts: list[tuple[int, Optional[str]]] = []
    in_strings: list[int] = []
    line, counted, decorated = 1, 0, False
    for match in _STATEMENT_START.finditer("\n" + source):
        offset = match.start()  # in ``source``: the line's first character
        line += source.count("\n", counted, offset)
        counted = offset
        inside = bisect.bisect_left(string_starts, offset) - 1  # a string starting before the line
        if inside >= 0 and strings[inside][1] > offset:
            in_strings.append(line)
        elif match.group(4) is None:  # not a clause (``else:``)
            if not decorated:
                starts.append((line, match.group(3)))
            elif match.group(3):
                starts[-1] = (starts[-1][0], match.group(3))
            decorated = match.group(1) is not None
    firsts = [first for first, _ in starts]
    for line in in_strings:
        chunk = bisect.bisect_right(firsts, line) - 1
        if chunk >= 0 and starts[chunk][1] is not None:
            return None
    return starts


def _triple_quoted(source: str) -> list[tuple[int, int]]:
    """Where each triple-quoted string lies, read from its quotes alone (the split's checks catch a misreading)."""
    quotes = []
    for quote in _TRIPLE_QUOTES:
        at = source.find(quote)
        while at >= 0:
            quotes.append((at, quote))
            at = source.find(quote, at + 3)
    quotes.sort()
    strings: list[tuple[int, int]] = []
    opened: Optional[tuple[int, str]] = None
    for at, quote in quotes:
        if opened is None:
            opened = (at, quote)
        elif quote == opened[1] and at >= opened[0] + 3:
            strings.append((opened[0], at + 3))
            opened = None
    return strings + ([(opened[0], len(source))] if opened is not None else [])


def _first(node: ast.stmt) -> int:
    """A statement's first line, decorators included."""
    return min((d.lineno for d in getattr(node, "decorator_list", ())), default=node.lineno)


def _line(item: tuple[int, object]) -> int:
    return item[0]


def layout_of(tree: ast.Module) -> Layout:
    """The layout of a file parsed whole: every class's body known."""
    spans: list[Span] = []
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ClassDef):
            spans.append(ClassSpan(node.name, _first(node), node.end_lineno or node.lineno, class_body(node)))
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
        self._bodies: dict[tuple[str, int], ClassBody] = {}
        """The bodies of classes parsed since, by their source's digest and first line."""

    def of(self, source: str) -> Optional[Layout]:
        """``source``'s layout; None where the standard library cannot parse it."""
        if source not in self._by_source:
            encoded = self._kept_layouts().get(source_digest(source))
            if encoded is not None:
                self._by_source[source] = tuple(_decoded(span) for span in encoded)
                return self._by_source[source]
            split = split_module(source)
            self._by_source[source] = split.layout if split is not None else _whole_layout(source)
            self._found.add(source)
        return self._by_source[source]

    def body(self, source: str, lines: list[str], span: ClassSpan) -> ClassBody:
        """The body of a class of ``source``'s layout (``lines``: its lines), parsed here where it is not known yet;
        raises :class:`MisSplit` where the class is not where the layout says (:meth:`whole` then lays it out)."""
        if span.body is not None:
            return span.body
        key = (source_digest(source), span.first)
        if key not in self._bodies:
            self._bodies[key] = class_body(class_tree(lines, span))
        return self._bodies[key]

    def classes_named_in(self, source: str, classes: Iterable[str]) -> Optional[frozenset[str]]:
        """The module-level classes of ``source`` whose names the text of ``classes`` holds (what they may build or
        inherit from); None where that text is not known for sure (no layout, a class not where it says)."""
        layout = self.of(source)
        if layout is None:
            return None
        spans = {span.name: span for span in layout if isinstance(span, ClassSpan)}
        lines = source_lines(source)
        text: list[str] = []
        for name in classes:
            span = spans.get(name)
            if span is not None:
                try:
                    self.body(source, lines, span)  # checks the class is where the layout says
                except MisSplit:
                    return None
                text += lines[span.first - 1 : span.last]
        words = set(re.findall(r"\w+", "".join(text)))
        return frozenset(name for name in spans if name in words)

    def whole(self, source: str) -> Optional[Layout]:
        """``source``'s layout from the whole file parsed, which replaces the one split."""
        self._by_source[source] = _whole_layout(source)
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


def _whole_layout(source: str) -> Optional[Layout]:
    try:
        return layout_of(python_tree(source))
    except (SyntaxError, ValueError):
        return None


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _encoded(span: Span) -> list:
    if isinstance(span, ClassSpan):
        body = [_encoded(s) for s in span.body] if span.body is not None else None
        return ["class", span.name, span.first, span.last, body]
    if isinstance(span, FunctionSpan):
        statements = [_encoded(s) for s in span.statements]
        return ["def", span.cls, span.name, span.line, span.column, span.last, span.decorators, span.body, statements]
    return ["statement", *span]


def _decoded(data: list) -> Any:
    kind, *fields = data
    if kind == "class":
        name, first, last, body = fields
        return ClassSpan(name, first, last, tuple(_decoded(s) for s in body) if body is not None else None)
    if kind == "def":
        cls, name, line, column, last, decorators, body, statements = fields
        decorated = tuple(tuple(d) for d in decorators)
        kept = tuple(_decoded(s) for s in statements)
        return FunctionSpan(cls, name, line, column, last, decorated, tuple(body), kept)
    return StatementSpan(*fields)
