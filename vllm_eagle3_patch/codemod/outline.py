"""Parse only what a codemod reads: the bodies of the other functions are set aside.

LibCST parses and writes out about 10,000 lines a second, and a vLLM target file has
up to 1,700 of them, of which a codemod reads a few functions.  :func:`outline` swaps
the body of every other function and method for a one-line placeholder (found with
the standard library's parser, written in C), and so every class, function, import and
class attribute the codemod never looks at, neighbours sharing one placeholder; LibCST
works on that outline, and :meth:`Outline.restore` puts the text back verbatim.  Everything
else goes through LibCST as before, so the result is the same, byte for byte.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Optional, Sequence

from ..eagle3.python_layout import (
    ClassBody,
    ClassSpan,
    FunctionSpan,
    Layouts,
    MisSplit,
    Span,
    StatementSpan,
    source_lines,
)


class Function(NamedTuple):
    """A module-level function or a method of a module-level class, as a codemod sees it."""

    cls: Optional[str]
    name: str
    text: str
    """Its source, decorators excepted."""


Keep = Callable[[Function], bool]
"""Whether a codemod reads (or changes) the body of this function."""
KeepClass = Callable[[str], bool]
"""Whether a codemod looks at this module-level class at all (its name, bases or any method)."""
Sees = Callable[[Function], bool]
"""Whether a codemod looks at this function at all (its name, decorators or signature), body or not."""


class Statement(NamedTuple):
    """Any other statement of the module or of a module-level class (an import, a class attribute)."""

    cls: Optional[str]
    kind: str
    """``import`` or ``other`` (docstrings and compound statements are always kept: see ``_ALWAYS_SEEN``)."""
    text: str


SeesStatement = Callable[[Statement], bool]
"""Whether a codemod looks at this statement."""
ReadsStatement = Callable[[Function, str], bool]
"""Of a function whose body a codemod reads, whether it reads this statement of it, simple or compound (given its
whole text; asked of ``__init__``'s only, where a codemod looks for a few assignments among dozens of lines)."""


@dataclass(frozen=True)
class Outline:
    text: str
    """The source with set-aside bodies replaced by placeholder lines."""
    bodies: tuple[str, ...]
    """The set-aside bodies, in order: placeholder ``i`` stands for ``bodies[i]``."""
    nonce: str

    def restore(self, code: str) -> str:
        """``code`` (the outline, transformed) with every placeholder line replaced by its body."""
        if not self.bodies:
            return code
        placeholder = re.compile(rf"([ \t]*)(?:\.\.\.|{_IMPORTS})  # <set aside (\d+) {self.nonce}>(?:\r\n|\n)?")
        restored, count = placeholder.subn(self._body, code)
        if count != len(self.bodies):  # a codemod changed a function it declared it does not read
            raise RuntimeError(f"outline: {count} of {len(self.bodies)} set-aside function bodies came back")
        return restored

    def _body(self, placeholder: re.Match) -> str:
        """The body a placeholder stands for, which must come back at the indentation it left, and the line end
        the placeholder was given where the body has none (the last line of a file without one, now followed by
        what a codemod appended)."""
        body = self.bodies[int(placeholder.group(2))]
        if not body.startswith(placeholder.group(1)) or body[len(placeholder.group(1))] in " \t":
            raise RuntimeError(f"outline: a set-aside body came back at another indentation: {body[:60]!r}")
        given = placeholder.group(0)[len(placeholder.group(0).rstrip("\r\n")) :]
        return body if body.endswith(("\n", "\r")) else body + given


def outline(
    source: str,
    keep: Keep,
    keep_class: Optional[KeepClass] = None,
    sees: Optional[Sees] = None,
    layouts: Optional[Layouts] = None,
    sees_statement: Optional[SeesStatement] = None,
    reads_statement: Optional[ReadsStatement] = None,
) -> Outline:
    """``source`` with the body of every function that ``keep`` rejects set aside, every function that ``sees``
    rejects set aside whole (decorators and signature too: a wrapper's codemod only asks whether a class has a
    getter), every module-level class that ``keep_class`` rejects set aside whole (a model file holds dozens
    the codemod never reads), and every other statement that ``sees_statement`` rejects (imports, class
    attributes; None: every one is looked at), and of each ``__init__`` read, the statements that
    ``reads_statement`` rejects.  Neighbours set aside whole share one placeholder, with the
    blank lines and comments between them.  ``layouts``: the release's, which may know where the file's
    statements lie already (else the source is parsed here).

    Sources the standard library cannot parse (newer syntax, errors, lone ``\\r`` line
    ends) are returned whole: LibCST then parses them whole, and says what is wrong.
    """
    whole = Outline(source, (), "")
    if "\r" in source.replace("\r\n", ""):
        return whole
    layouts = layouts or Layouts()
    layout = layouts.of(source)
    if layout is None:
        return whole
    lines = source_lines(source)
    nonce = secrets.token_hex(8)
    bodies: list[str] = []
    parts: list[str] = []
    done = 0  # lines[:done] are in parts
    body_of = lambda span: layouts.body(source, lines, span)
    reading = _Reading(lines, keep, keep_class, sees, sees_statement, reads_statement, body_of)
    try:
        pieces = list(reading.set_aside(None, layout))
    except MisSplit:  # a class is not where the split put it: the file laid out whole
        layout = layouts.whole(source)
        pieces = list(reading.set_aside(None, layout)) if layout is not None else []
    for first, last, stands_for in pieces:
        body = "".join(lines[first - 1 : last])
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        newline = body[len(body.rstrip("\r\n")) :]
        parts.append("".join(lines[done : first - 1]))
        parts.append(f"{indent}{stands_for}  # <set aside {len(bodies)} {nonce}>{newline}")
        bodies.append(body)
        done = last
    parts.append("".join(lines[done:]))
    return Outline("".join(parts), tuple(bodies), nonce)


class _Piece(NamedTuple):
    first: int
    last: int
    stands_for: str
    """The placeholder's statement: ``...``, or an import where imports are set aside (so that a new import
    still goes after the last one: ``cst_tools.add_import``)."""


_WHOLE = "..."
_ALWAYS_SEEN = ("docstring", "compound")
"""A codemod inserts after a docstring, and a compound statement ends a module's opening imports
(``cst_tools.add_import``): neither is set aside."""
_IMPORTS = "import _set_aside"
_READ_BY_TEXT = ("other", "compound")
"""The statements of an ``__init__`` read that ``reads_statement`` is asked of, given their whole text: an ``if`` or a
``for`` block too, whose text holds every line a codemod could look for in it."""


@dataclass(frozen=True)
class _Reading:
    """What of a file the codemod looks at (``outline``'s predicates), over the file's lines."""

    lines: list[str]
    keep: Keep
    keep_class: Optional[KeepClass]
    sees: Optional[Sees]
    sees_statement: Optional[SeesStatement]
    reads_statement: Optional[ReadsStatement] = None
    body: Callable[[ClassSpan], ClassBody] = lambda span: span.body or ()
    """A class's body (``Layouts.body``: parsed where the layout does not know it yet)."""

    def set_aside(self, cls: Optional[str], spans: Sequence[Span]) -> Iterator[_Piece]:
        """The pieces to set aside of one body (the module's, or a class's), in source order: neighbours
        set aside whole, of one kind, merged into one piece."""
        run: Optional[_Piece] = None
        for index, span in enumerate(spans):
            alone = index + 1 == len(spans) or spans[index + 1].first > span.last  # nothing after it on its line
            whole = self._whole(cls, span) if alone else None
            if whole is not None and run is not None and run.stands_for == whole:
                run = run._replace(last=span.last)
                continue
            if run is not None:
                yield run
            run = _Piece(span.first, span.last, whole) if whole is not None else None
            if whole is None:
                yield from self._inside(span)
        if run is not None:
            yield run

    def _whole(self, cls: Optional[str], span: Span) -> Optional[str]:
        """The placeholder ``span`` is set aside whole under, or None where it is (partly) read."""
        if isinstance(span, ClassSpan):
            return _WHOLE if self.keep_class is not None and not self.keep_class(span.name) else None
        if isinstance(span, FunctionSpan):
            seen = self.sees is None or not _on_own_lines(span, self.lines) or self.sees(self._function(span))
            return None if seen else _WHOLE
        if span.kind in _ALWAYS_SEEN or self.sees_statement is None or not self._starts_its_line(span):
            return None
        text = "".join(self.lines[span.first - 1 : span.last])
        if self.sees_statement(Statement(cls, span.kind, text)):
            return None
        return _IMPORTS if span.kind == "import" and cls is None else _WHOLE

    def _inside(self, span: Span) -> Iterator[_Piece]:
        """What to set aside inside a piece read: a class's body, a function's body."""
        if isinstance(span, ClassSpan):
            yield from self.set_aside(span.name, self.body(span))
        elif isinstance(span, FunctionSpan) and _body_on_own_lines(span, self.lines):
            if not self.keep(self._function(span)):
                yield _Piece(span.body[0], span.last, _WHOLE)
            elif self.reads_statement is not None and span.statements:
                yield from self._unread_statements(span, self.reads_statement)

    def _unread_statements(self, function: FunctionSpan, reads: ReadsStatement) -> Iterator[_Piece]:
        """Of a function read, the runs of statements (simple or compound), each alone on its lines, that ``reads``
        rejects."""
        read, spans = self._function(function), function.statements
        run: Optional[_Piece] = None
        for index, span in enumerate(spans):
            alone = index + 1 == len(spans) or spans[index + 1].first > span.last
            text = "".join(self.lines[span.first - 1 : span.last])
            if alone and span.kind in _READ_BY_TEXT and self._starts_its_line(span) and not reads(read, text):
                run = _Piece(span.first, span.last, _WHOLE) if run is None else run._replace(last=span.last)
                continue
            if run is not None:
                yield run
            run = None
        if run is not None:
            yield run

    def _function(self, span: FunctionSpan) -> Function:
        return Function(span.cls, span.name, "".join(self.lines[span.line - 1 : span.last]))

    def _starts_its_line(self, span: StatementSpan) -> bool:
        return self.lines[span.first - 1][: span.column].strip() in ("", "@")


def _on_own_lines(function: FunctionSpan, lines: list[str]) -> bool:
    """Whether the function, decorators included, starts a line of its own (not ``class A: def f(): ...``)."""
    starts = (*function.decorators, (function.line, function.column))
    return all(lines[line - 1][:column].strip() in ("", "@") for line, column in starts)


def _body_on_own_lines(function: FunctionSpan, lines: list[str]) -> bool:
    """Whether the body starts on a line of its own (not ``def f(): return 1``)."""
    line, column = function.body
    return line > function.line and lines[line - 1][:column].strip() == ""
