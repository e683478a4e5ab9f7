"""Parse only what a codemod reads: the bodies of the other functions are set aside.

LibCST parses and writes out about 10,000 lines a second, and a vLLM target file has
up to 1,700 of them, of which a codemod reads a few functions.  :func:`outline` swaps
the body of every other function and method for a one-line placeholder (found with
the standard library's parser, written in C), LibCST works on that outline, and
:meth:`Outline.restore` puts the bodies back verbatim.  Everything outside the set-aside
bodies goes through LibCST as before, so the result is the same, byte for byte.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Optional

from ..python_layout import ClassSpan, FunctionSpan, Layout, Layouts, source_lines


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
        placeholder = re.compile(rf"([ \t]*)\.\.\.  # <set aside (\d+) {self.nonce}>(?:\r\n|\n)?")
        restored, count = placeholder.subn(self._body, code)
        if count != len(self.bodies):  # a codemod changed a function it declared it does not read
            raise RuntimeError(f"outline: {count} of {len(self.bodies)} set-aside function bodies came back")
        return restored

    def _body(self, placeholder: re.Match) -> str:
        """The body a placeholder stands for, which must come back at the indentation it left."""
        body = self.bodies[int(placeholder.group(2))]
        if not body.startswith(placeholder.group(1)) or body[len(placeholder.group(1))] in " \t":
            raise RuntimeError(f"outline: a set-aside body came back at another indentation: {body[:60]!r}")
        return body


def outline(
    source: str,
    keep: Keep,
    keep_class: Optional[KeepClass] = None,
    sees: Optional[Sees] = None,
    layouts: Optional[Layouts] = None,
) -> Outline:
    """``source`` with the body of every function that ``keep`` rejects set aside, every function that ``sees``
    rejects set aside whole (decorators and signature too: a wrapper's codemod only asks whether a class has a
    getter), and every module-level class that ``keep_class`` rejects set aside whole (a model file holds dozens
    the codemod never reads).  ``layouts``: the release's, which may know where the file's functions and classes
    lie already (else the source is parsed here).

    Sources the standard library cannot parse (newer syntax, errors, lone ``\\r`` line
    ends) are returned whole: LibCST then parses them whole, and says what is wrong.
    """
    whole = Outline(source, (), "")
    if "\r" in source.replace("\r\n", ""):
        return whole
    layout = (layouts or Layouts()).of(source)
    if layout is None:
        return whole
    lines = source_lines(source)
    nonce = secrets.token_hex(8)
    bodies: list[str] = []
    parts: list[str] = []
    done = 0  # lines[:done] are in parts
    for first, last in _set_aside(layout, lines, keep, keep_class, sees):
        body = "".join(lines[first - 1 : last])
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        newline = body[len(body.rstrip("\r\n")) :]
        parts.append("".join(lines[done : first - 1]))
        parts.append(f"{indent}...  # <set aside {len(bodies)} {nonce}>{newline}")
        bodies.append(body)
        done = last
    parts.append("".join(lines[done:]))
    return Outline("".join(parts), tuple(bodies), nonce)


def _set_aside(
    layout: Layout, lines: list[str], keep: Keep, keep_class: Optional[KeepClass], sees: Optional[Sees]
) -> Iterator[tuple[int, int]]:
    """``(first, last)`` lines of each piece to set aside, in source order: whole classes ``keep_class``
    rejects and whole functions ``sees`` rejects (decorators included), and the bodies of the functions
    ``keep`` rejects."""
    for span in layout:
        if isinstance(span, ClassSpan):
            if keep_class is not None and not keep_class(span.name):
                yield span.first, span.last
                continue
            functions: tuple[FunctionSpan, ...] = span.methods
        else:
            functions = (span,)
        for function in functions:
            seen = Function(function.cls, function.name, "".join(lines[function.line - 1 : function.last]))
            if sees is not None and _on_own_lines(function, lines) and not sees(seen):
                yield function.first, function.last
            elif _body_on_own_lines(function, lines) and not keep(seen):
                yield function.body[0], function.last


def _on_own_lines(function: FunctionSpan, lines: list[str]) -> bool:
    """Whether the function, decorators included, starts a line of its own (not ``class A: def f(): ...``)."""
    starts = (*function.decorators, (function.line, function.column))
    return all(lines[line - 1][:column].strip() in ("", "@") for line, column in starts)


def _body_on_own_lines(function: FunctionSpan, lines: list[str]) -> bool:
    """Whether the body starts on a line of its own (not ``def f(): return 1``)."""
    line, column = function.body
    return line > function.line and lines[line - 1][:column].strip() == ""
