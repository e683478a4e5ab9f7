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
        placeholder = re.compile(rf"[ \t]*\.\.\.  # <set aside (\d+) {self.nonce}>(?:\r\n|\n)?")
        restored, count = placeholder.subn(lambda match: self.bodies[int(match.group(1))], code)
        if count != len(self.bodies):  # a codemod changed a function it declared it does not read
            raise RuntimeError(f"outline: {count} of {len(self.bodies)} set-aside function bodies came back")
        return restored


def outline(source: str, keep: Keep) -> Outline:
    """``source`` with the body of every function that ``keep`` rejects set aside.

    Sources the standard library cannot parse (newer syntax, errors, lone ``\\r`` line
    ends) are returned whole: LibCST then parses them whole, and says what is wrong.
    """
    whole = Outline(source, (), "")
    if "\r" in source.replace("\r\n", ""):
        return whole
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes etc. are vLLM's business, not ours
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return whole
    lines = _LINE.findall(source)
    nonce = secrets.token_hex(8)
    bodies: list[str] = []
    parts: list[str] = []
    done = 0  # lines[:done] are in parts
    for cls, node in _functions(tree):
        first, last = node.body[0].lineno, node.end_lineno or node.lineno
        if not _body_on_own_lines(node, lines) or keep(
            Function(cls, node.name, "".join(lines[node.lineno - 1 : last]))
        ):
            continue
        body = "".join(lines[first - 1 : last])
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        newline = body[len(body.rstrip("\r\n")) :]
        parts.append("".join(lines[done : first - 1]))
        parts.append(f"{indent}...  # <set aside {len(bodies)} {nonce}>{newline}")
        bodies.append(body)
        done = last
    parts.append("".join(lines[done:]))
    return Outline("".join(parts), tuple(bodies), nonce)


def _functions(tree: ast.Module) -> Iterator[tuple[Optional[str], FunctionNode]]:
    """Module-level functions and the methods of module-level classes, in source order."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield node.name, child


def _body_on_own_lines(node: FunctionNode, lines: list[str]) -> bool:
    """Whether the body starts on a line of its own (not ``def f(): return 1``)."""
    first = node.body[0]
    return first.lineno > node.lineno and lines[first.lineno - 1][: first.col_offset].strip() == ""
