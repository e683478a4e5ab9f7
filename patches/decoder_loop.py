"""The decoder loop of a model's ``forward``, found in the codemod's tree, and what its capture needs to know.

What a decoder loop is (its shapes) is ``eagle3/loop_shapes.py``'s, read on the standard library's tree of the
loop; this module reads the model's ``forward`` around it once (:func:`read_forward`): which statement is the
loop, what the residual stream between two layers is, and where the last layer's output, the non-last ranks'
hand-on and the return are.  Read only, from upstream's code; the edits are ``decoder_eagle3.py``'s.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    assignment,
    assigns_self_attribute,
    block_statements,
    cst,
    exactly_one,
    find,
    is_attribute,
    is_name,
    is_self_attribute,
    method,
    names_in,
    sole_statement,
)
from vllm_eagle3_patch.codemod.patch import Unrecognised
from vllm_eagle3_patch.eagle3 import loop_shapes
from vllm_eagle3_patch.eagle3.loop_shapes import LoopMatch
from vllm_eagle3_patch.eagle3.python_layout import (
    ClassSpan,
    Layouts,
    MisSplit,
    class_tree,
    python_tree,
    source_lines,
)

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # typing's from Python 3.10; only read by the type checker


@dataclass(frozen=True)
class Loop:
    """The decoder loop of ``forward`` and what the codemod needs to know about it."""

    node: cst.For
    shape: LoopMatch

    @property
    def layer(self) -> str:
        """The name the layer is bound to (``layer``)."""
        return self.shape.layer

    @property
    def global_id(self) -> Optional[str]:
        """The name already holding the global layer id, or None: enumerate it."""
        return self.shape.global_id

    @property
    def layers(self) -> str:
        """The attribute holding the decoder layers (``layers``; ``h`` and ``blocks`` in GPT-2-style models)."""
        return self.shape.layers

    @property
    def pipelined(self) -> bool:
        """Whether the loop runs this pipeline stage's layers (``self.start_layer`` to ``self.end_layer``);
        a model without pipeline parallelism runs all of them, and its ids count from 0."""
        return self.shape.pipelined

    @property
    def start(self) -> str:
        return "self.start_layer" if self.pipelined else "0"

    @property
    def end(self) -> str:
        """The id after the stage's last layer: the last layer's output is captured under it."""
        return "self.end_layer" if self.pipelined else f"len(self.{self.layers})"


@dataclass(frozen=True)
class DecoderForward:
    """A model's ``forward`` read around its decoder loop, a top-level statement of it: what the capture
    and the pipeline verdict (``pipeline_relay.py``) read."""

    function: cst.FunctionDef
    loop: Loop
    at: int
    """The loop's index in the body."""
    last_at: int
    """Where the stream leaving the last layer is captured (:func:`last_layer_index`)."""

    @property
    def body(self) -> list[cst.BaseStatement]:
        return block_statements(self.function.body)

    @property
    def before_loop(self) -> list[cst.BaseStatement]:
        return self.body[: self.at]

    @property
    def after_loop(self) -> list[cst.BaseStatement]:
        """From the loop to the last layer's capture: where a non-last rank hands its stream on."""
        return self.body[self.at + 1 : self.last_at]

    @property
    def from_last(self) -> list[cst.BaseStatement]:
        """From the last layer's capture to the end: the last rank's final norm and the return."""
        return self.body[self.last_at :]


def read_forward(model: cst.ClassDef) -> DecoderForward:
    """``model``'s ``forward`` around its one decoder loop."""
    forward = method(model, "forward")
    init = method(model, "__init__")
    body = block_statements(forward.body)
    staged = lambda: assigns_self_attribute(init, "start_layer")  # pipeline stages: asked of a loop over all layers
    loops = loop_shapes.decoder_loops([s for s in body if isinstance(s, cst.For)], loop_shape, staged)
    name = model.name.value
    what = f"a loop over self.layers from self.start_layer to self.end_layer (or over self.h, ...) in {name}.forward"
    node, shape = exactly_one(loops, what)
    at = body.index(node)
    return DecoderForward(forward, Loop(node, shape), at, last_layer_index(body, at))


def loop_shape(node: cst.CSTNode) -> Optional[LoopMatch]:
    """The decoder loop shape of ``node`` (``loop_shapes.SHAPES``), or None."""
    if not isinstance(node, cst.For):
        return None
    lines = [s for s in node.body.body if isinstance(s, cst.SimpleStatementLine)]  # what a shape's body line may be
    read = node.with_changes(body=node.body.with_changes(body=lines or [cst.SimpleStatementLine([cst.Pass()])]))
    return loop_shapes.loop_shape(_as_ast(read.with_changes(leading_lines=(), orelse=None)))


def _as_ast(node: cst.CSTNode) -> ast.stmt:
    """The standard library's tree of a statement of the codemod's tree (a loop), written out: what the
    shapes are matched on; a statement it cannot parse (newer syntax) is a ``pass``."""
    parsed = _parsed(cst.Module([]).code_for_node(node))
    return parsed.body[0] if parsed.body else ast.Pass()


def _parsed(code: str) -> ast.Module:
    try:
        return ast.parse(code)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def upstream_capture(loop: Loop) -> Optional[str]:
    """The list upstream's own loop appends aux states to, or None:
    ``if <id> in self.aux_hidden_state_layers: <list>.append(...)`` (Step-1 appends in two branches, with
    or without a residual)."""
    statement = upstream_capture_statement(loop)
    if statement is None:
        return None
    appends = find(statement.body, cst.Call, lambda call: is_attribute(call.func, "append"))
    receivers = [call.func.value for call in appends if isinstance(call.func, cst.Attribute)]
    lists = {receiver.value for receiver in receivers if is_name(receiver)}
    if appends and len(lists) == 1:
        return lists.pop()
    raise Unrecognised("expected the aux hidden state capture in the decoder loop to append to one list")


def upstream_capture_statement(loop: Loop) -> Optional[cst.If]:
    """Upstream's ``if <id> in self.aux_hidden_state_layers: ...`` in the loop body, or None."""
    for statement in loop.node.body.body:
        if not isinstance(statement, cst.If):
            continue
        test = statement.test
        if (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.In)
            and is_self_attribute(test.comparisons[0].comparator, "aux_hidden_state_layers")
        ):
            return statement
    return None


def residual_stream(loop: Loop, model: str, layers_add_the_residual: bool = False) -> str:
    """The expression of the residual stream between two layers, as a tensor nothing later writes into.

    ``hidden_states, residual = layer(..., residual)``: the layer hands the residual on beside its output
    (vLLM's fused add-norm), so the stream is their sum, a fresh tensor (``hidden_states`` alone before the
    first layer), unless the layers never read the residual they are given (``layers_add_the_residual``).
    ``hidden_states = layer(...)``, or a pair whose second part the next layer is not handed (StableLM): the
    next layer sees ``hidden_states`` alone, so that is the stream.

    A bare tensor is captured as a copy (:func:`fresh`): the next layer may write into its input in place
    (Falcon's ``residual += attention_output``, the fused ``fused_add_rms_norm`` into its residual argument),
    and the drafter must get the stream as it was, not as the layers left it.
    """
    line, names, call = _layer_call(loop, model)
    if loop.global_id in names:
        raise Unrecognised(f"the layer call in {model}.forward assigns the loop's index {loop.global_id!r}")
    hidden = _handed_on(loop, line, call, names[0], model)
    if len(names) == 1 or layers_add_the_residual or names[1] not in names_in(call):
        return fresh(hidden)
    return f"{fresh(hidden)} if {names[1]} is None else {hidden} + {names[1]}"


def fresh(name: str) -> str:
    """A copy of the tensor ``name``: what a capture of a bare tensor appends."""
    return f"{name}.clone()"


def _layer_call(loop: Loop, model: str) -> tuple[cst.SimpleStatementLine, tuple[str, ...], cst.BaseExpression]:
    """The loop's one statement calling the layer, the names it assigns and the call."""
    calls = [
        s
        for s in loop.node.body.body
        if isinstance(s, cst.SimpleStatementLine) and _layer_call_targets(sole_statement(s), loop.layer) is not None
    ]
    line = exactly_one(
        calls, f"the decoder layer call `hidden_states[, residual] = {loop.layer}(...)` in {model}.forward"
    )
    names = _layer_call_targets(line.body[0], loop.layer)
    found = assignment(line.body[0])
    assert names is not None and found is not None
    return line, names, found[1]


def _handed_on(loop: Loop, line: cst.SimpleStatementLine, call: cst.BaseExpression, output: str, model: str) -> str:
    """The name the next layer is handed: the layer's ``output`` where the call passes it on, else the
    argument that a later statement of the loop sets from it (Zamba2's ``layer_outputs = layer(hidden_states,
    ...)`` then ``hidden_states = layer_outputs``): captured before the call, ``output`` is not bound yet."""
    arguments = names_in(call)
    if output in arguments:
        return output
    body = list(loop.node.body.body)
    for statement in body[body.index(line) + 1 :]:
        found = assignment(sole_statement(statement))
        if found is None:
            continue
        target, value = found
        if is_name(target) and target.value in arguments and output in names_in(value):
            return target.value
    raise Unrecognised(
        f"expected {model}.forward to hand {output!r}, the output of its decoder layer call, to the next layer"
    )


def layers_ignoring_the_residual(source: str, model: str, layouts: Layouts) -> bool:
    """Whether the layer classes ``model``'s ``__init__`` builds (classes of the file) take a ``residual``
    and never read it: their ``forward`` assigns it before any use (``residual = hidden_states`` first).
    Read with :mod:`ast`, class by class (the file's layout says where each lies), since the codemod's outline
    sets the layer bodies aside."""
    classes = _classes(source, layouts)
    init = _ast_method(classes(model), "__init__")
    built = (
        {n.func.id for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if init
        else set()
    )
    forwards = [_ast_method(classes(name), "forward") for name in built if name != model]
    takers = [f for f in forwards if f is not None and "residual" in {a.arg for a in f.args.args}]
    return bool(takers) and all(_assigns_before_reading(f, "residual") for f in takers)


def _classes(source: str, layouts: Layouts) -> Callable[[str], Optional[ast.ClassDef]]:
    """The module-level class of a name (the last of that name, as Python binds it), parsed alone where the
    layout has it; the file whole where its lines are not numbered as the layout's (lone ``\\r`` line ends) or
    the class is not where the layout says (``python_layout.MisSplit``)."""
    layout = layouts.of(source)
    if layout is None:
        raise SyntaxError("the standard library cannot parse this file")
    if "\r" in source.replace("\r\n", ""):
        return _whole_classes(source).get
    spans = {span.name: span for span in layout if isinstance(span, ClassSpan)}
    lines = source_lines(source)

    def parsed(name: str) -> Optional[ast.ClassDef]:
        try:
            return class_tree(lines, spans[name]) if name in spans else None
        except MisSplit:
            return _whole_classes(source).get(name)

    return parsed


def _whole_classes(source: str) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in python_tree(source).body if isinstance(node, ast.ClassDef)}


def _ast_method(cls: Optional[ast.ClassDef], name: str) -> Optional[ast.FunctionDef]:
    if cls is None:
        return None
    return next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _assigns_before_reading(function: ast.FunctionDef, name: str) -> bool:
    for statement in function.body:
        loads = [n for n in ast.walk(statement) if isinstance(n, ast.Name) and n.id == name]
        if not loads:
            continue
        stores_only = isinstance(statement, ast.Assign) and all(isinstance(n.ctx, ast.Store) for n in loads)
        return stores_only
    return False


def _layer_call_targets(statement: Optional[cst.BaseSmallStatement], callee: str) -> Optional[tuple[str, ...]]:
    """``("a", "b")`` for ``a, b = <callee>(...)``, ``("a",)`` for ``a = <callee>(...)``, else None."""
    target, value = assignment(statement) or (None, None)
    if target is None or not (isinstance(value, cst.Call) and is_name(value.func, callee)):
        return None
    if is_name(target):
        return (target.value,)
    if isinstance(target, cst.Tuple) and len(target.elements) == 2:
        names = [e.value.value for e in target.elements if isinstance(e, cst.Element) and is_name(e.value)]
        return tuple(names) if len(names) == 2 else None
    return None


def last_layer_index(body: list[cst.BaseStatement], after: int) -> int:
    """Where the stream leaving the last layer is captured (id ``end_layer``): right after the loop, past
    the return that hands a non-last rank's stream on (``return IntermediateTensors(...)``) where there is
    one, so that only the last rank captures it.  Not before the final norm: what comes between may change
    what ``hidden_states`` and ``residual`` hold (HYV3 folds the residual into ``hidden_states`` there)."""
    for index in range(after + 1, len(body)):
        statement = body[index]
        if hands_on(statement):
            goes_on = isinstance(statement, cst.If) and statement.orelse is not None
            return index if goes_on else index + 1  # `else:` the last rank's part (Bailing MoE): before it all
    return after + 1


def hands_on(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` holds ``return IntermediateTensors(...)``: what a non-last rank hands the next."""
    return bool(find(statement, cst.Return, is_handing_on))


def is_handing_on(node: cst.CSTNode) -> TypeGuard[cst.Return]:
    returned = node.value if isinstance(node, cst.Return) else None
    return isinstance(returned, cst.Call) and is_name(returned.func, "IntermediateTensors")


def final_return(body: list[cst.BaseStatement], model: str) -> str:
    """What ``forward`` returns at its end (``hidden_states``, ``self.norm(hidden_states)``): the
    early return with the aux states returns the same expression beside them."""
    returned = sole_statement(body[-1])
    if isinstance(returned, cst.Return) and returned.value is not None and not isinstance(returned.value, cst.Tuple):
        return cst.Module([]).code_for_node(returned.value)
    raise Unrecognised(f"expected {model}.forward to end with `return <hidden states>`")
