"""Parse only what a codemod reads: the bodies of the other functions are set aside.

LibCST parses and writes out about 10,000 lines a second, and a vLLM target file has
up to 1,700 of them, of which a codemod reads a few functions.  :func:`outline` swaps
the body of every other function and method for a one-line placeholder (found with
the standard library's parser, written in C), LibCST works on that outline, and
:meth:`Outline.restore` puts the bodies back verbatim.  Everything outside the set-aside
bodies goes through LibCST as before, so the result is the same, byte for byte.
"""

from __future__ import annotations

import ast
import functools
import re
import secrets
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Optional, Union

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n)|[^\r\n]+$")
FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


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


@functools.lru_cache(maxsize=2)
def python_tree(source: str) -> ast.Module:
    """The standard library's tree of ``source``, kept for the file being judged: the outline and the
    codemod's own look at the layer classes share one parse.  Never to be changed in place."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes etc. are vLLM's business, not ours
        return ast.parse(source)


def outline(source: str, keep: Keep, keep_class: Optional[KeepClass] = None, sees: Optional[Sees] = None) -> Outline:
    """``source`` with the body of every function that ``keep`` rejects set aside, every function that ``sees``
    rejects set aside whole (decorators and signature too: a wrapper's codemod only asks whether a class has a
    getter), and every module-level class that ``keep_class`` rejects set aside whole (a model file holds dozens
    the codemod never reads).

    Sources the standard library cannot parse (newer syntax, errors, lone ``\\r`` line
    ends) are returned whole: LibCST then parses them whole, and says what is wrong.
    """
    whole = Outline(source, (), "")
    if "\r" in source.replace("\r\n", ""):
        return whole
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError):
        return whole
    lines = _LINE.findall(source)
    nonce = secrets.token_hex(8)
    bodies: list[str] = []
    parts: list[str] = []
    done = 0  # lines[:done] are in parts
    for first, last in _set_aside(tree, lines, keep, keep_class, sees):
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
    tree: ast.Module, lines: list[str], keep: Keep, keep_class: Optional[KeepClass], sees: Optional[Sees]
) -> Iterator[tuple[int, int]]:
    """``(first, last)`` lines of each piece to set aside, in source order: whole classes ``keep_class``
    rejects and whole functions ``sees`` rejects (decorators included), and the bodies of the functions
    ``keep`` rejects."""
    for cls, node in _functions(tree, keep_class):
        last = node.end_lineno or node.lineno
        if isinstance(node, ast.ClassDef):
            yield _first_line(node), last
            continue
        function = Function(cls, node.name, "".join(lines[node.lineno - 1 : last]))
        if sees is not None and _on_own_lines(node, lines) and not sees(function):
            yield _first_line(node), last
        elif _body_on_own_lines(node, lines) and not keep(function):
            yield node.body[0].lineno, last


def _functions(
    tree: ast.Module, keep_class: Optional[KeepClass] = None
) -> Iterator[tuple[Optional[str], Union[FunctionNode, ast.ClassDef]]]:
    """Module-level functions and the methods of module-level classes, in source order; a class that
    ``keep_class`` rejects comes whole instead of its methods."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            if keep_class is not None and not keep_class(node.name):
                yield None, node
                continue
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield node.name, child


def _first_line(node: Union[FunctionNode, ast.ClassDef]) -> int:
    """The first line of a class or function, its decorators included."""
    return min((d.lineno for d in node.decorator_list), default=node.lineno)


def _on_own_lines(node: FunctionNode, lines: list[str]) -> bool:
    """Whether the function, decorators included, starts a line of its own (not ``class A: def f(): ...``)."""
    return all(lines[n.lineno - 1][: n.col_offset].strip() in ("", "@") for n in (*node.decorator_list, node))


def _body_on_own_lines(node: FunctionNode, lines: list[str]) -> bool:
    """Whether the body starts on a line of its own (not ``def f(): return 1``)."""
    first = node.body[0]
    return first.lineno > node.lineno and lines[first.lineno - 1][: first.col_offset].strip() == ""
