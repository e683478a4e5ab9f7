"""The decoder loop of a model's ``forward``, found by structure, and what its capture needs to know.

Which loop runs the decoder layers and under which ids, what the residual stream between two layers
is, and where the final norm and the return are: read only, from upstream's code; the edits are
``decoder_eagle3.py``'s.

Four loop shapes are recognised: ``islice(self.layers, self.start_layer, self.end_layer)``,
``self.layers[self.start_layer:self.end_layer]`` (enumerated with global ids),
``for i in range(self.start_layer, self.end_layer): layer = self.layers[i]`` and either of the
first two already ``enumerate``-d from ``self.start_layer`` (``i`` is the id); without pipeline
stages, a loop over all of ``self.layers`` (``self.h``, ``self.blocks``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    assigned,
    assigns_self_attribute,
    cst,
    find,
    is_attribute,
    is_name,
    is_self_attribute,
    method,
    names_in,
    only,
    sole_statement,
)
from vllm_eagle3_patch.codemod.outline import python_tree
from vllm_eagle3_patch.codemod.target import Unrecognised


@dataclass(frozen=True)
class Loop:
    """The decoder loop of ``forward`` and what the codemod needs to know about it."""

    at: int
    """Its index in the body of ``forward``."""
    node: cst.For
    layer: str
    """The name the layer is bound to (``layer``)."""
    global_id: Optional[str]
    """The name already holding the global layer id (range form), or None: enumerate it."""
    layers: str = "layers"
    """The attribute holding the decoder layers (``layers``; ``h`` and ``blocks`` in GPT-2-style models)."""
    pipelined: bool = True
    """Whether the loop runs this pipeline stage's layers (``self.start_layer`` to ``self.end_layer``);
    a model without pipeline parallelism runs all of them, and its ids count from 0."""

    @property
    def start(self) -> str:
        return "self.start_layer" if self.pipelined else "0"

    @property
    def end(self) -> str:
        """The id after the stage's last layer: the last layer's output is captured under it."""
        return "self.end_layer" if self.pipelined else f"len(self.{self.layers})"


def is_staged(model: cst.ClassDef) -> bool:
    """Whether the model has pipeline stages: its ``__init__`` assigns ``self.start_layer`` (alone or in a
    tuple, ``self.start_layer, self.end_layer, self.layers = make_layers(...)``)."""
    return assigns_self_attribute(method(model, "__init__"), "start_layer")


NO_PIPELINE_LAYERS = ("layers", "h", "blocks")
"""What a loop over all the layers may iterate (``for layer in self.layers``): only these names,
since without ``self.start_layer`` nothing else says that the loop is the decoder's."""


def decoder_loop(body: list[cst.BaseStatement], model: str, staged: bool = False) -> Loop:
    """``staged``: the model has pipeline stages (``self.start_layer``); a loop over all its layers is
    then the decoder's only where it numbers them itself from 0 (``for i, layer in enumerate(self.layers)``,
    the hybrid models' form: global ids), not a bare ``for layer in self.layers``."""

    def is_decoder_loop(statement: cst.BaseStatement) -> bool:
        loop = _loop_shape(statement) if isinstance(statement, cst.For) else None
        return loop is not None and (loop.pipelined or not staged or loop.global_id is not None)

    loops = [s for s in body if is_decoder_loop(s)]
    what = f"a loop over self.layers from self.start_layer to self.end_layer (or over self.h, ...) in {model}.forward"
    node: cst.For = only(loops, what)  # type: ignore[assignment]
    return _loop_shape(node, body.index(node))  # type: ignore[return-value]


def _loop_shape(loop: cst.For, at: int = 0) -> Optional[Loop]:
    """The decoder loop ``loop`` is, or None.

    The iterable is the stage's layers (``islice(self.X, self.start_layer, self.end_layer)``,
    ``self.X[self.start_layer:self.end_layer]``), all of them (``self.layers``, no pipeline
    parallelism), either of them ``enumerate``-d, or ``range(self.start_layer, self.end_layer)``
    with ``layer = self.X[i]`` in the body.  The id is the enumerate's index where it counts from
    the stage's first layer, else the codemod enumerates the loop itself.
    """
    target, iterable = loop.target, loop.iter
    enumerated = isinstance(iterable, cst.Call) and is_name(iterable.func, "enumerate") and len(iterable.args) in (1, 2)
    if enumerated and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        layers = _own_layers(iterable.args[0].value)  # type: ignore[attr-defined]
        index, layer = (e.value for e in target.elements)
        if layers is None or not is_name(layer):
            return None
        name, pipelined = layers
        counts_globally = _counts_from(iterable.args[1:], "self.start_layer" if pipelined else "0")  # type: ignore[attr-defined]
        global_id = index.value if counts_globally and is_name(index) else None  # type: ignore[attr-defined]
        return Loop(at, loop, layer.value, global_id, name, pipelined)  # type: ignore[attr-defined]
    if not isinstance(target, cst.Name):
        return None
    layers = _own_layers(iterable)
    if layers is not None:
        return Loop(at, loop, target.value, None, *layers)
    if _ranges_stage(iterable):
        index = target.value
        bindings = [(s, _bound_layers(sole_statement(s), index)) for s in loop.body.body]
        bound = [(s, name) for s, name in bindings if name is not None]
        if len(bound) == 1:
            statement, name = bound[0]
            return Loop(at, loop, assigned(sole_statement(statement)).value, index, name)  # type: ignore[union-attr]
    return None


def _own_layers(iterable: cst.BaseExpression) -> Optional[tuple[str, bool]]:
    """``(attribute, pipelined)`` where ``iterable`` is ``islice(self.X, self.start_layer, self.end_layer)``,
    ``self.X[self.start_layer:self.end_layer]`` (pipelined), or ``self.layers`` itself (not), else None."""
    if isinstance(iterable, cst.Call) and (is_name(iterable.func, "islice") or is_attribute(iterable.func, "islice")):
        args = [arg.value for arg in iterable.args]
        stage = len(args) == 3 and is_self_attribute(args[1], "start_layer") and is_self_attribute(args[2], "end_layer")
        return (_self_attribute(args[0]), True) if stage and _self_attribute(args[0]) else None
    if isinstance(iterable, cst.Subscript) and len(iterable.slice) == 1:
        part = iterable.slice[0].slice
        if (
            isinstance(part, cst.Slice)
            and part.step is None
            and part.lower is not None
            and part.upper is not None
            and is_self_attribute(part.lower, "start_layer")
            and is_self_attribute(part.upper, "end_layer")
            and _self_attribute(iterable.value)
        ):
            return _self_attribute(iterable.value), True
        return None
    if any(is_self_attribute(iterable, name) for name in NO_PIPELINE_LAYERS):
        return iterable.attr.value, False  # type: ignore[attr-defined]
    return None


def _self_attribute(node: cst.BaseExpression) -> str:
    """``X`` of ``self.X``, or the empty string."""
    if isinstance(node, cst.Attribute) and is_name(node.value, "self"):
        return node.attr.value
    return ""


def _counts_from(start: list[cst.Arg], expected: str) -> bool:
    """Whether ``enumerate``'s start argument (none, or ``start=...``) is ``expected``."""
    if not start:
        return expected == "0"
    (arg,) = start
    if arg.keyword is not None and not is_name(arg.keyword, "start"):
        return False
    if expected == "0":
        return isinstance(arg.value, cst.Integer) and arg.value.value == "0"
    return is_self_attribute(arg.value, "start_layer")


def enumerates_own_layers(iterable: cst.BaseExpression) -> bool:
    """``enumerate(<the stage's layers>, start=self.start_layer)``: global ids (upstream's loop from 0.18.0)."""
    if not (isinstance(iterable, cst.Call) and is_name(iterable.func, "enumerate") and len(iterable.args) == 2):
        return False
    layers = _own_layers(iterable.args[0].value)
    return layers is not None and layers[1] and _counts_from(list(iterable.args[1:]), "self.start_layer")


def _ranges_stage(iterable: cst.BaseExpression) -> bool:
    """``range(self.start_layer, self.end_layer)``"""
    if not (isinstance(iterable, cst.Call) and is_name(iterable.func, "range")):
        return False
    args = [arg.value for arg in iterable.args]
    return len(args) == 2 and is_self_attribute(args[0], "start_layer") and is_self_attribute(args[1], "end_layer")


def _bound_layers(statement: Optional[cst.BaseSmallStatement], index: str) -> Optional[str]:
    """``X`` where the statement is ``<name> = self.X[<index>]``, else None."""
    if not (is_name(assigned(statement)) and isinstance(statement.value, cst.Subscript)):  # type: ignore[union-attr]
        return None
    subscript: cst.Subscript = statement.value  # type: ignore[union-attr,assignment]
    if (
        len(subscript.slice) == 1
        and isinstance(subscript.slice[0].slice, cst.Index)
        and is_name(subscript.slice[0].slice.value, index)
    ):
        return _self_attribute(subscript.value) or None
    return None


def upstream_capture(loop: Loop) -> Optional[str]:
    """The list upstream's own loop appends aux states to, or None:
    ``if <id> in self.aux_hidden_state_layers: <list>.append(...)`` (Step-1 appends in two branches, with
    or without a residual)."""
    statement = upstream_capture_statement(loop)
    if statement is None:
        return None
    appends = find(statement.body, cst.Call, lambda call: is_attribute(call.func, "append"))
    lists = {call.func.value.value for call in appends if is_name(call.func.value)}  # type: ignore[attr-defined]
    if appends and len(lists) == 1:
        return lists.pop()
    raise Unrecognised("expected the aux hidden state capture in the decoder loop to append to one list")


def upstream_capture_statement(loop: Loop) -> Optional[cst.If]:
    """Upstream's ``if <id> in self.aux_hidden_state_layers: ...`` in the loop body, or None."""
    for statement in loop.node.body.body:
        test = statement.test if isinstance(statement, cst.If) else None
        if (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.In)
            and is_self_attribute(test.comparisons[0].comparator, "aux_hidden_state_layers")
        ):
            return statement  # type: ignore[return-value]
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
    line, names = _layer_call(loop, model)
    if loop.global_id in names:
        raise Unrecognised(f"the layer call in {model}.forward assigns the loop's index {loop.global_id!r}")
    hidden = _handed_on(loop, line, names[0], model)
    if len(names) == 1 or layers_add_the_residual or names[1] not in names_in(line.body[0].value):  # type: ignore[attr-defined]
        return fresh(hidden)
    return f"{fresh(hidden)} if {names[1]} is None else {hidden} + {names[1]}"


def fresh(name: str) -> str:
    """A copy of the tensor ``name``: what a capture of a bare tensor appends."""
    return f"{name}.clone()"


def _layer_call(loop: Loop, model: str) -> tuple[cst.SimpleStatementLine, tuple[str, ...]]:
    """The loop's one statement calling the layer, and the names it assigns."""
    calls = [s for s in loop.node.body.body if _layer_call_targets(sole_statement(s), loop.layer) is not None]
    line: cst.SimpleStatementLine = only(
        calls, f"the decoder layer call `hidden_states[, residual] = {loop.layer}(...)` in {model}.forward"
    )  # type: ignore[assignment]
    names = _layer_call_targets(line.body[0], loop.layer)
    assert names is not None
    return line, names


def _handed_on(loop: Loop, line: cst.SimpleStatementLine, output: str, model: str) -> str:
    """The name the next layer is handed: the layer's ``output`` where the call passes it on, else the
    argument that a later statement of the loop sets from it (Zamba2's ``layer_outputs = layer(hidden_states,
    ...)`` then ``hidden_states = layer_outputs``): captured before the call, ``output`` is not bound yet."""
    arguments = names_in(line.body[0].value)  # type: ignore[attr-defined]
    if output in arguments:
        return output
    body = list(loop.node.body.body)
    for statement in body[body.index(line) + 1 :]:
        small = sole_statement(statement)
        target = assigned(small)
        if is_name(target) and target.value in arguments and output in names_in(small.value):  # type: ignore[union-attr]
            return target.value  # type: ignore[union-attr]
    raise Unrecognised(
        f"expected {model}.forward to hand {output!r}, the output of its decoder layer call, to the next layer"
    )


def layers_ignoring_the_residual(source: str, model: str) -> bool:
    """Whether the layer classes ``model``'s ``__init__`` builds (classes of the file) take a ``residual``
    and never read it: their ``forward`` assigns it before any use (``residual = hidden_states`` first).
    Read with :mod:`ast` from the whole source, whose layer bodies the codemod's outline sets aside."""
    tree = python_tree(source)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    init = _ast_method(classes.get(model), "__init__")
    built = (
        {n.func.id for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if init
        else set()
    )
    forwards = [_ast_method(classes[name], "forward") for name in built if name in classes and name != model]
    takers = [f for f in forwards if f is not None and "residual" in {a.arg for a in f.args.args}]
    return bool(takers) and all(_assigns_before_reading(f, "residual") for f in takers)


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
    target = assigned(statement)
    if target is None or not (isinstance(statement.value, cst.Call) and is_name(statement.value.func, callee)):  # type: ignore[union-attr]
        return None
    if is_name(target):
        return (target.value,)  # type: ignore[union-attr]
    if (
        isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and all(isinstance(e, cst.Element) and is_name(e.value) for e in target.elements)
    ):
        return tuple(e.value.value for e in target.elements)  # type: ignore[attr-defined]
    return None


def last_layer_index(body: list[cst.BaseStatement], after: int) -> int:
    """Where the stream leaving the last layer is captured (id ``end_layer``): right after the loop, past
    the return that hands a non-last rank's stream on (``return IntermediateTensors(...)``) where there is
    one, so that only the last rank captures it.  Not before the final norm: what comes between may change
    what ``hidden_states`` and ``residual`` hold (HYV3 folds the residual into ``hidden_states`` there)."""
    for index in range(after + 1, len(body)):
        if hands_on(body[index]):
            goes_on = isinstance(body[index], cst.If) and body[index].orelse is not None  # type: ignore[attr-defined]
            return index if goes_on else index + 1  # `else:` the last rank's part (Bailing MoE): before it all
    return after + 1


def hands_on(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` holds ``return IntermediateTensors(...)``: what a non-last rank hands the next."""
    return bool(find(statement, cst.Return, is_handing_on))


def is_handing_on(node: cst.CSTNode) -> bool:
    returned = node.value if isinstance(node, cst.Return) else None
    return isinstance(returned, cst.Call) and is_name(returned.func, "IntermediateTensors")


def final_return(body: list[cst.BaseStatement], model: str) -> str:
    """What ``forward`` returns at its end (``hidden_states``, ``self.norm(hidden_states)``): the
    early return with the aux states returns the same expression beside them."""
    returned = sole_statement(body[-1])
    if isinstance(returned, cst.Return) and returned.value is not None and not isinstance(returned.value, cst.Tuple):
        return cst.Module([]).code_for_node(returned.value)
    raise Unrecognised(f"expected {model}.forward to end with `return <hidden states>`")
