"""What a decoder loop is: the ``for`` statement that runs a model's decoder layers, and its shapes, as one table.

A model's decoder loop is a top-level ``for`` of its ``forward`` (:func:`may_be_a_decoder_loop`: where the class
chain looks for the decoder, ``class_chain.py``) whose shape is one of :data:`SHAPES`; in a model with pipeline
stages (its ``__init__`` assigns ``self.start_layer``) a loop over all of its layers counts only where it numbers
them from 0 itself (the hybrid models' form), not a bare ``for layer in self.layers``.  Each shape is written as
the Python it matches, with placeholders (:data:`PLACEHOLDERS`), and matched on the standard library's tree, the
one parser of this question: the class chain has that tree of every model file, and the codemod
(``patches/decoder_loop.py``) hands over the one loop it patches, written out (a few hundred microseconds, where
LibCST over every model file would cost seconds).  Adding a loop shape is one entry of :data:`SHAPES` and its case
in ``tests/codemods/toy_decoders.py``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional, TypeVar

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # typing's from Python 3.10; only read by the type checker

Statement = TypeVar("Statement")


@dataclass(frozen=True)
class LoopShape:
    """A form of the decoder loop: its name, and the ``for`` headers (and body lines) it matches."""

    name: str
    headers: tuple[str, ...]
    """What the ``for`` line may be, ``:`` left out; any of them."""
    pipelined: bool = True
    """Whether it runs this pipeline stage's layers (``self.start_layer`` to ``self.end_layer``); a model
    without pipeline parallelism runs all of them, and its ids count from 0."""
    binds: tuple[str, ...] = ()
    """What one statement of the body must be, where the header binds no layer (any of them)."""


SHAPES = (
    LoopShape(
        "the stage's layers",
        (
            "for LAYER in islice(self.LAYERS, self.start_layer, self.end_layer)",
            "for LAYER in self.LAYERS[self.start_layer:self.end_layer]",
        ),
    ),
    LoopShape(
        "the stage's layers, numbered from its first",
        (
            "for ID, LAYER in enumerate(islice(self.LAYERS, self.start_layer, self.end_layer), start=self.start_layer)",
            "for ID, LAYER in enumerate(self.LAYERS[self.start_layer:self.end_layer], start=self.start_layer)",
        ),
    ),
    LoopShape(
        "the stage's layers, numbered otherwise",
        (
            "for ANY, LAYER in enumerate(islice(self.LAYERS, self.start_layer, self.end_layer))",
            "for ANY, LAYER in enumerate(islice(self.LAYERS, self.start_layer, self.end_layer), start=ANY)",
            "for ANY, LAYER in enumerate(self.LAYERS[self.start_layer:self.end_layer])",
            "for ANY, LAYER in enumerate(self.LAYERS[self.start_layer:self.end_layer], start=ANY)",
        ),
    ),
    LoopShape(
        "the stage's ids, each taking its layer",
        ("for ID in range(self.start_layer, self.end_layer)",),
        binds=("LAYER = self.LAYERS[ID]", "LAYER: ANY = self.LAYERS[ID]"),
    ),
    LoopShape("all the layers", ("for LAYER in self.ALL",), pipelined=False),
    LoopShape(
        "all the layers, numbered from 0",
        ("for ID, LAYER in enumerate(self.ALL)", "for ID, LAYER in enumerate(self.ALL, start=0)"),
        pipelined=False,
    ),
    LoopShape(
        "all the layers, numbered otherwise", ("for ANY, LAYER in enumerate(self.ALL, start=ANY)",), pipelined=False
    ),
)
"""Every decoder loop shape, the first that matches wins.  ``enumerate``'s start is matched alike
whether passed by keyword or by position."""

NO_PIPELINE_LAYERS = ("layers", "h", "blocks")
"""What a loop over all the layers may iterate (``for layer in self.layers``): only these names,
since without ``self.start_layer`` nothing else says that the loop is the decoder's."""

PLACEHOLDERS = {
    "LAYER": "the name the layer is bound to",
    "ID": "the name holding the layer's global id",
    "LAYERS": "the attribute holding the layers (any: ``self.layers``, GPT-2's ``self.h``)",
    "ALL": f"the attribute holding the layers, one of {', '.join(NO_PIPELINE_LAYERS)}",
    "ANY": "anything",
}


@dataclass(frozen=True)
class LoopMatch:
    """A decoder loop as its shape reads it."""

    shape: LoopShape
    layer: str
    """The name the layer is bound to (``layer``)."""
    global_id: Optional[str]
    """The name already holding the global layer id, or None: the codemod numbers the layers itself."""
    layers: str
    """The attribute holding the decoder layers (``layers``; ``h`` and ``blocks`` in GPT-2-style models)."""

    @property
    def pipelined(self) -> bool:
        return self.shape.pipelined

    def runs_the_decoder(self, staged: Callable[[], bool]) -> bool:
        """In a model with pipeline stages (``staged()``), a loop over all its layers is the decoder's
        only where it numbers them from 0 itself."""
        return self.pipelined or self.global_id is not None or not staged()


def may_be_a_decoder_loop(statement: ast.stmt) -> TypeGuard[ast.For]:
    """Whether a top-level statement of ``forward`` stands where a decoder loop does: a ``for``.  Which class
    of a model file is the decoder is decided by this alone (``class_chain.py``): whether its loop has one
    of the shapes is then the codemod's to say, with its reason."""
    return isinstance(statement, ast.For)


def loop_shape(statement: ast.stmt) -> Optional[LoopMatch]:
    """The decoder loop shape ``statement`` has, or None."""
    if not may_be_a_decoder_loop(statement):
        return None
    for shape in SHAPES:
        for header in shape.headers:
            bound = _matched(_header_pattern(header).target, statement.target, {})
            if bound is not None:
                bound = _matched(_header_pattern(header).iter, _keyword_start(statement.iter), bound)
            if bound is not None and shape.binds:
                bound = _sole_binding(shape.binds, statement.body, bound)
            if bound is not None:
                return LoopMatch(shape, bound["LAYER"], bound.get("ID"), bound.get("LAYERS") or bound["ALL"])
    return None


def decoder_loops(
    statements: Iterable[Statement], shape_of: Callable[[Statement], Optional[LoopMatch]], staged: Callable[[], bool]
) -> list[tuple[Statement, LoopMatch]]:
    """The decoder loops among the top-level ``statements`` of a model's ``forward`` (one, where the model
    is a decoder), each with its shape; ``staged()``: whether the model has pipeline stages (its ``__init__``
    assigns ``self.start_layer``)."""
    found = [(statement, shape_of(statement)) for statement in statements]
    return [(statement, match) for statement, match in found if match is not None and match.runs_the_decoder(staged)]


def _sole_binding(binds: tuple[str, ...], body: list[ast.stmt], bound: dict[str, str]) -> Optional[dict[str, str]]:
    """``bound`` and what the one statement of ``body`` matching ``binds`` binds, or None."""
    found = [b for b in (_binding(binds, statement, bound) for statement in body) if b is not None]
    return found[0] if len(found) == 1 else None


def _binding(binds: tuple[str, ...], statement: ast.stmt, bound: dict[str, str]) -> Optional[dict[str, str]]:
    for bind in binds:
        matched = _matched(_line_pattern(bind), statement, bound)
        if matched is not None:
            return matched
    return None


@functools.cache
def _header_pattern(code: str) -> ast.For:
    """A shape's header (``for X in Y``), as a tree."""
    header = ast.parse(f"{code}:\n    pass").body[0]
    assert isinstance(header, ast.For), code
    return header


@functools.cache
def _line_pattern(code: str) -> ast.stmt:
    """A shape's body line, as a tree."""
    return ast.parse(code).body[0]


def _keyword_start(iterable: ast.expr) -> ast.expr:
    """``enumerate(x, s)`` as ``enumerate(x, start=s)``: the two say the same."""
    if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate"):
        return iterable
    if len(iterable.args) != 2 or iterable.keywords:
        return iterable
    start = ast.keyword(arg="start", value=iterable.args[1])
    return ast.Call(func=iterable.func, args=iterable.args[:1], keywords=[start])


_IGNORED = ("ctx", "type_comment", "kind", "lineno", "col_offset", "end_lineno", "end_col_offset")


def _matched(pattern: object, node: object, bound: dict[str, str]) -> Optional[dict[str, str]]:
    """``bound`` with what the placeholders of ``pattern`` stand for in ``node``, or None where it does not match."""
    if isinstance(pattern, ast.Name) and pattern.id in PLACEHOLDERS:
        if pattern.id == "ANY":
            return bound
        return _bind(pattern.id, node.id, bound) if isinstance(node, ast.Name) else None
    if isinstance(pattern, ast.Attribute) and pattern.attr in ("LAYERS", "ALL"):
        if not (isinstance(node, ast.Attribute) and _is_self(node.value)):
            return None
        if pattern.attr == "ALL" and node.attr not in NO_PIPELINE_LAYERS:
            return None
        return _bind(pattern.attr, node.attr, bound)
    if isinstance(pattern, list):
        if not isinstance(node, list) or len(pattern) != len(node):
            return None
        for item, other in zip(pattern, node):
            matched = _matched(item, other, bound)
            if matched is None:
                return None
            bound = matched
        return bound
    if not isinstance(pattern, ast.AST):
        return bound if pattern == node else None
    if type(pattern) is not type(node):
        return None
    for field, value in ast.iter_fields(pattern):
        if field not in _IGNORED:
            matched = _matched(value, getattr(node, field, None), bound)
            if matched is None:
                return None
            bound = matched
    return bound


def _bind(placeholder: str, value: str, bound: dict[str, str]) -> Optional[dict[str, str]]:
    """``bound`` with ``placeholder`` standing for ``value``, or None where it already stands for another."""
    if bound.get(placeholder, value) != value:
        return None
    return {**bound, placeholder: value}


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"
