"""Make a decoder-only model family an EAGLE-3 target, from its :class:`~vllm_eagle3_patch.codemod.family.Family`.

The generalisation of ``deepseek_v2.py``'s codemod: the family's model ``__init__`` sets
``self.aux_hidden_state_layers``; its ``forward`` captures the residual stream entering
each requested global layer id (``hidden_states + residual``, or ``hidden_states`` where
there is no residual yet) and the last layer's output before the norm (id ``end_layer``),
and returns ``(hidden_states, aux_hidden_states)`` when anything was captured; the
causal-LM class gains ``SupportsEagle3`` (where the release has it) and the two methods,
under the names the release's runner calls (``eagle3/release.py``).  A multimodal
wrapper is ``wrapper_eagle3.py``'s.

From 0.18.0, upstream's own models inherit ``EagleModelMixin`` and capture with
``_maybe_add_hidden_state(..., idx + 1, ...)``: ids local to the pipeline stage, and the
mixin's default ``(2, n // 2, n - 3)`` repeats ids below 7 layers.  Rather than take the mixin
and correct both, the patched model keeps this codemod's ``forward`` and overrides both
methods of ``SupportsEagle3``, so the protocol's defaults (which expect the mixin) never run.

Four loop shapes are recognised: ``islice(self.layers, self.start_layer, self.end_layer)``,
``self.layers[self.start_layer:self.end_layer]`` (enumerated with global ids),
``for i in range(self.start_layer, self.end_layer): layer = self.layers[i]`` and either of the
first two already ``enumerate``-d from ``self.start_layer`` (``i`` is the id).  DeepSeek-V2/V3,
the first family, uses the first two.  Where upstream's loop already captures the requested
ids (Qwen3-Next on 0.18-0.19, whose causal LM lacks the methods), only id ``end_layer`` is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    add_base,
    add_import,
    add_methods,
    assigned,
    cst,
    find,
    find_statements,
    has_method,
    is_attribute,
    is_name,
    is_self_attribute,
    mark,
    mark_header,
    mark_line,
    method,
    names_in,
    only,
    replace_child,
    replace_node,
    sole_statement,
    statements,
    top_level_class,
)
from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.judge import declares_eagle3, judge
from vllm_eagle3_patch.codemod.target import Options, SingleFileTarget, State, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.release import GETTER, MIXIN, PACKAGE, PROTOCOL, Release
from vllm_eagle3_patch.patches.eagle3_methods import eagle3_methods

AUX = "aux_hidden_states"
INDEX = "aux_layer_idx"
WANTED = "aux_layer_ids"
"""A local copy of ``self.aux_hidden_state_layers``: the loop then pays ~30 ns a layer, not ~75."""


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


@dataclass(frozen=True)
class DecoderEagle3:
    """Add EAGLE-3 aux hidden state collection to ``family.model`` / ``family.causal_lm``.

    ``protocol``: add ``SupportsEagle3`` to the bases (releases before 0.10.1 have none;
    their runner calls the methods by name).  ``aux_layers``: fixed ids for the getter.
    ``getter``: the getter's name, the one the release's runner asks for.
    """

    family: Family
    protocol: bool = True
    aux_layers: Optional[tuple[int, ...]] = None
    getter: str = GETTER

    def transform_module(self, tree: cst.Module) -> cst.Module:
        model = top_level_class(tree, self.family.model)
        causal_lm = top_level_class(tree, self.family.causal_lm)
        tree = replace_child(tree, model, self.patch_model(model, tree))
        tree = replace_child(tree, causal_lm, self.patch_causal_lm(causal_lm, tree))
        if self.protocol:
            tree = add_import(tree, f"{PACKAGE}.interfaces", PROTOCOL, PACKAGE)
        return tree

    def patch_model(self, model: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
        """``__init__`` sets the empty ids (unless upstream's does); ``forward`` captures, unless
        it is inherited from ``family.forward_from``'s model, which that family's file patches, or
        upstream's ``EagleModelMixin`` decoder already collects global ids (then only the causal LM
        lacks the protocol: Qwen3-Next on 0.20-0.23)."""
        if _collects_global_ids(model):
            return self.patch_collecting_model(model, tree)
        init = method(model, "__init__")
        new_model = model
        if not _sets_aux_layers(init):
            new_model = replace_child(new_model, init, self.patch_init(init, tree))
        if self.family.ids_on_the_class:
            new_model = _declare_empty_ids(new_model, tree)
        if self.family.forward_from is not None:
            _require_inherited_forward(model, self.family.forward_from.model)
        else:
            forward = method(model, "forward")
            new_model = replace_child(new_model, forward, self.patch_forward(forward, tree))
        return new_model

    def patch_collecting_model(self, model: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
        """Upstream's collecting decoder, kept but for two things that make its ids this tool's:
        ``__init__`` sets the empty ids on the instance, and the capture before the loop names the
        stage's first layer by its global id (``self.start_layer``, 0 on the first rank) instead of 0,
        so a later pipeline stage captures the residual stream entering it under its own id."""
        init = method(model, "__init__")
        new_model = model if _sets_aux_layers(init) else replace_child(model, init, self.patch_init(init, tree))
        forward = method(new_model, "forward")
        return replace_child(new_model, forward, _start_at_the_stage(forward, model.name.value))

    def patch_init(self, init: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
        (reset,) = statements("self.aux_hidden_state_layers = tuple[int, ...]()\n", tree)
        return init.with_changes(body=init.body.with_changes(body=[*init.body.body, mark_line(reset)]))

    def patch_forward(self, forward: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
        model = self.family.model
        body = list(forward.body.body)
        loop = _decoder_loop(body, model)
        hidden, residual = _layer_call_names(loop, model)
        state = f"{hidden} if {residual} is None else {hidden} + {residual}"
        collected = _upstream_capture(loop)
        if collected is not None:
            return self.capture_last_too(forward, loop, collected, state, tree)
        taken = names_in(forward) & {AUX, INDEX, WANTED}
        if taken:
            raise Unrecognised(f"{model}.forward already uses the name {sorted(taken)[0]!r}")
        norm_at = _norm_call_index(body, loop.at, model)
        returned = _final_return(body, model)
        index = loop.global_id or INDEX

        collect, wanted = statements(f"{AUX} = []\n{WANTED} = self.aux_hidden_state_layers\n", tree)
        (capture,) = statements(f"if {index} in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (capture_last,) = statements(f"if self.end_layer in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (early_return,) = statements(f"if {AUX}:\n    return {returned}, {AUX}\n", tree)

        new_body = [
            *body[: loop.at],
            _move_leading_lines(body[loop.at], mark_line(collect)),
            mark_line(wanted),
            self.capture_in_loop(loop, capture),
            *body[loop.at + 1 : norm_at],
            _move_leading_lines(body[norm_at], mark(capture_last)),
            body[norm_at].with_changes(leading_lines=()),
            *body[norm_at + 1 : -1],
            _move_leading_lines(body[-1], mark(early_return)),
            body[-1].with_changes(leading_lines=()),
        ]
        return forward.with_changes(body=forward.body.with_changes(body=new_body))

    def capture_last_too(
        self, forward: cst.FunctionDef, loop: Loop, collected: str, state: str, tree: cst.Module
    ) -> cst.FunctionDef:
        """Upstream's own loop already captures the input of each requested global id into
        ``collected`` (Qwen3-Next on 0.18-0.19, whose causal LM lacks the methods): add id
        ``end_layer``, the last layer's pre-norm output, so every family takes the same ids."""
        body = list(forward.body.body)
        norm_at = _norm_call_index(body, loop.at, self.family.model)
        (capture_last,) = statements(
            f"if self.end_layer in self.aux_hidden_state_layers:\n    {collected}.append({state})\n", tree
        )
        new_body = [
            *body[:norm_at],
            _move_leading_lines(body[norm_at], mark(capture_last)),
            body[norm_at].with_changes(leading_lines=()),
            *body[norm_at + 1 :],
        ]
        return forward.with_changes(body=forward.body.with_changes(body=new_body))

    def capture_in_loop(self, loop: Loop, capture: cst.BaseStatement) -> cst.For:
        """The capture first in the loop body; ``for layer in X:`` becomes
        ``for aux_layer_idx, layer in enumerate(X, start=self.start_layer):``."""
        node = loop.node.with_changes(leading_lines=())
        body = node.body.with_changes(body=[mark(capture), *node.body.body])
        if loop.global_id is not None:
            return node.with_changes(body=body)
        no_space = cst.SimpleWhitespace("")
        start = cst.Arg(
            cst.parse_expression("self.start_layer"),
            keyword=cst.Name("start"),
            equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space),
        )
        numbered = cst.Call(cst.Name("enumerate"), args=[cst.Arg(node.iter), start])
        target = cst.Tuple([cst.Element(cst.Name(INDEX)), cst.Element(node.target)], lpar=[], rpar=[])
        return node.with_changes(target=target, iter=numbered, body=mark_header(body))

    def patch_causal_lm(self, causal_lm: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
        if self.protocol:
            causal_lm = add_base(causal_lm, PROTOCOL)
        return add_methods(causal_lm, eagle3_methods(self.family.decoder, self.aux_layers, self.getter), tree)


def _collects_global_ids(model: cst.ClassDef) -> bool:
    """Whether ``model`` is upstream's collecting decoder: an ``EagleModelMixin`` whose ``forward``
    captures id 0 before its loop and ``i + 1`` after layer ``i``, ``i`` counted from
    ``self.start_layer`` (global ids: this tool's semantics, id ``n`` included)."""
    if not any(is_name(base.value, MIXIN) for base in model.bases):
        return False
    forward = method(model, "forward")
    captures = find(forward, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
    loops = [loop for loop in find(forward, cst.For) if _enumerates_own_layers(loop.iter)]
    if not captures or len(loops) != 1:
        raise Unrecognised(
            f"{model.name.value} inherits {MIXIN}, but its forward does not capture with "
            "self._maybe_add_hidden_state in a loop enumerated from self.start_layer"
        )
    return True


def _start_at_the_stage(forward: cst.FunctionDef, model: str) -> cst.FunctionDef:
    """``self._maybe_add_hidden_state([], 0, ...)`` before the loop -> ``(..., self.start_layer, ...)``."""

    def first_capture(line: cst.SimpleStatementLine) -> bool:
        calls = find(line, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
        return len(calls) == 1 and len(calls[0].args) >= 2 and isinstance(calls[0].args[1].value, cst.Integer)

    line = only(
        find_statements(forward, cst.SimpleStatementLine, first_capture), f"the id-0 capture before {model}'s loop"
    )
    (call,) = find(line, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
    if call.args[1].value.value != "0":  # type: ignore[attr-defined]
        raise Unrecognised(f"expected {model}.forward to capture id 0 before its loop")
    start = call.args[1].with_changes(value=cst.parse_expression("self.start_layer"))
    new_call = call.with_changes(args=[call.args[0], start, *call.args[2:]])
    return replace_node(forward, line, mark_line(replace_node(line, call, new_call)))


def _sets_aux_layers(init: cst.FunctionDef) -> bool:
    """Whether upstream's ``__init__`` already sets ``self.aux_hidden_state_layers`` (0.18.0 on)."""
    targets = [assigned(sole_statement(line)) for line in init.body.body]
    return any(target is not None and is_self_attribute(target, "aux_hidden_state_layers") for target in targets)


def _require_inherited_forward(model: cst.ClassDef, parent: str) -> None:
    """The model must run ``parent.forward`` as it is: a subclass of it, without its own ``forward``."""
    if not any(is_name(base.value, parent) for base in model.bases):
        raise Unrecognised(f"expected {model.name.value} to subclass {parent}, whose forward it runs")
    if has_method(model, "forward"):
        raise Unrecognised(f"{model.name.value} defines its own forward; expected it to run {parent}.forward")


def _declare_empty_ids(model: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
    """``aux_hidden_state_layers: tuple[int, ...] = ()`` first in the class body (after its
    docstring): what a subclass that never runs this ``__init__`` reads in ``forward``."""
    (declared,) = statements("aux_hidden_state_layers: tuple[int, ...] = ()\n", tree)
    body = list(model.body.body)
    at = 1 if body and _is_docstring(body[0]) else 0
    return model.with_changes(body=model.body.with_changes(body=[*body[:at], mark_line(declared), *body[at:]]))


def _is_docstring(statement: cst.BaseStatement) -> bool:
    small = sole_statement(statement)
    return isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))


# --------------------------------------------------------------------------- the loop


def _decoder_loop(body: list[cst.BaseStatement], model: str) -> Loop:
    loops = [s for s in body if isinstance(s, cst.For) and _loop_shape(s) is not None]
    what = f"a loop over self.layers from self.start_layer to self.end_layer at the top of {model}.forward"
    node: cst.For = only(loops, what)  # type: ignore[assignment]
    layer, global_id = _loop_shape(node)  # type: ignore[misc]
    return Loop(body.index(node), node, layer, global_id)


def _loop_shape(loop: cst.For) -> Optional[tuple[str, Optional[str]]]:
    """``(layer name, global id name or None)`` for a recognised decoder loop, else None."""
    if isinstance(loop.target, cst.Tuple) and _enumerates_own_layers(loop.iter):
        names = [e.value.value for e in loop.target.elements if is_name(e.value)]  # type: ignore[attr-defined]
        return (names[1], names[0]) if len(names) == len(loop.target.elements) == 2 else None
    if not isinstance(loop.target, cst.Name):
        return None
    if _iterates_own_layers(loop.iter):
        return loop.target.value, None
    if _ranges_own_layers(loop.iter):
        index = loop.target.value
        bindings = [s for s in loop.body.body if _binds_layer(sole_statement(s), index)]
        if len(bindings) == 1:
            return assigned(sole_statement(bindings[0])).value, index  # type: ignore[union-attr]
    return None


def _iterates_own_layers(iterable: cst.BaseExpression) -> bool:
    """``islice(self.layers, self.start_layer, self.end_layer)`` or ``self.layers[self.start_layer:self.end_layer]``."""
    if isinstance(iterable, cst.Call) and (is_name(iterable.func, "islice") or is_attribute(iterable.func, "islice")):
        args = [arg.value for arg in iterable.args]
        return len(args) == 3 and all(
            is_self_attribute(a, n) for a, n in zip(args, ("layers", "start_layer", "end_layer"))
        )
    if isinstance(iterable, cst.Subscript) and len(iterable.slice) == 1:
        part = iterable.slice[0].slice
        return (
            isinstance(part, cst.Slice)
            and part.step is None
            and is_self_attribute(iterable.value, "layers")
            and part.lower is not None
            and part.upper is not None
            and is_self_attribute(part.lower, "start_layer")
            and is_self_attribute(part.upper, "end_layer")
        )
    return False


def _enumerates_own_layers(iterable: cst.BaseExpression) -> bool:
    """``enumerate(<own layers>, start=self.start_layer)``: global ids (upstream's loop from 0.18.0)."""
    if not (isinstance(iterable, cst.Call) and is_name(iterable.func, "enumerate") and len(iterable.args) == 2):
        return False
    layers, start = iterable.args
    return (
        _iterates_own_layers(layers.value)
        and (start.keyword is None or is_name(start.keyword, "start"))
        and is_self_attribute(start.value, "start_layer")
    )


def _ranges_own_layers(iterable: cst.BaseExpression) -> bool:
    """``range(self.start_layer, self.end_layer)``"""
    if not (isinstance(iterable, cst.Call) and is_name(iterable.func, "range")):
        return False
    args = [arg.value for arg in iterable.args]
    return len(args) == 2 and is_self_attribute(args[0], "start_layer") and is_self_attribute(args[1], "end_layer")


def _binds_layer(statement: Optional[cst.BaseSmallStatement], index: str) -> bool:
    """``<name> = self.layers[<index>]``"""
    if not (is_name(assigned(statement)) and isinstance(statement.value, cst.Subscript)):  # type: ignore[union-attr]
        return False
    subscript: cst.Subscript = statement.value  # type: ignore[union-attr,assignment]
    return (
        is_self_attribute(subscript.value, "layers")
        and len(subscript.slice) == 1
        and isinstance(subscript.slice[0].slice, cst.Index)
        and is_name(subscript.slice[0].slice.value, index)
    )


def _upstream_capture(loop: Loop) -> Optional[str]:
    """The list upstream's own loop appends aux states to, or None:
    ``if <id> in self.aux_hidden_state_layers: <list>.append(...)`` (Qwen3-Next, 0.18-0.19)."""
    for statement in loop.node.body.body:
        test = statement.test if isinstance(statement, cst.If) else None
        if not (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.In)
            and is_self_attribute(test.comparisons[0].comparator, "aux_hidden_state_layers")
        ):
            continue
        appends = find(statement.body, cst.Call, lambda call: is_attribute(call.func, "append"))
        if len(appends) == 1 and is_name(appends[0].func.value):  # type: ignore[attr-defined]
            return appends[0].func.value.value  # type: ignore[attr-defined]
        raise Unrecognised("expected the aux hidden state capture in the decoder loop to append to one list")
    return None


def _layer_call_names(loop: Loop, model: str) -> tuple[str, str]:
    """The names the layer call assigns: ``hidden_states, residual = layer(...)``."""
    calls = [s for s in loop.node.body.body if _assigns_pair_from_call(sole_statement(s), loop.layer)]
    line: cst.SimpleStatementLine = only(
        calls, f"the decoder layer call `hidden_states, residual = {loop.layer}(...)` in {model}.forward"
    )  # type: ignore[assignment]
    hidden, residual = (e.value.value for e in line.body[0].targets[0].target.elements)  # type: ignore[attr-defined]
    if loop.global_id in (hidden, residual):
        raise Unrecognised(f"the layer call in {model}.forward assigns the loop's index {loop.global_id!r}")
    return hidden, residual


def _assigns_pair_from_call(statement: Optional[cst.BaseSmallStatement], callee: str) -> bool:
    """``a, b = <callee>(...)``"""
    target = assigned(statement)
    return (
        isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and all(isinstance(e, cst.Element) and is_name(e.value) for e in target.elements)
        and isinstance(statement.value, cst.Call)  # type: ignore[union-attr]
        and is_name(statement.value.func, callee)  # type: ignore[union-attr]
    )


def _norm_call_index(body: list[cst.BaseStatement], after: int, model: str) -> int:
    for index in range(after + 1, len(body)):
        if find(body[index], cst.Call, lambda call: is_self_attribute(call.func, "norm")):
            return index
    raise Unrecognised(f"expected a call to self.norm after the decoder loop in {model}.forward")


def _final_return(body: list[cst.BaseStatement], model: str) -> str:
    returned = sole_statement(body[-1])
    if isinstance(returned, cst.Return) and isinstance(returned.value, cst.Name):
        return returned.value.value
    raise Unrecognised(f"expected {model}.forward to end with `return <hidden states>`")


def _move_leading_lines(source: cst.BaseStatement, target: cst.BaseStatement) -> cst.BaseStatement:
    """Inserted statements take over the blank lines and comments above the one they precede."""
    return target.with_changes(leading_lines=source.leading_lines)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the release


class DecoderTarget(SingleFileTarget):
    """A family's model file: optional (left alone where it cannot be patched) unless the family is required."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self.name = f"{family.name} model"
        self.path = family.path
        self.policy = family.policy
        self.serves = family.name

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        family = self.family

        def native(module: cst.Module) -> Optional[str]:
            """What the runner checks: the causal LM it holds is an EAGLE-3 target.  A collecting
            decoder under a causal LM without the protocol is half of it (the codemod adds the rest)."""
            return declares_eagle3(module, family.causal_lm, (PROTOCOL,))

        def codemod() -> DecoderEagle3:
            interface = release.interface
            if interface is None:
                raise Unrecognised(release.no_eagle3)
            return DecoderEagle3(family, interface.protocol, options.aux_layers, interface.getter)

        def preconditions() -> None:
            if family.forward_from is not None:
                require_patchable(family.forward_from, release, options)

        return judge(
            source,
            codemod,
            native=native,
            preconditions=preconditions,
            reads=lambda function: function.cls == family.model and function.name in ("__init__", "forward"),
        )


def require_patchable(family: Family, release: Release, options: Options) -> None:
    """A file whose patch relies on ``family``'s (a wrapper delegating to its causal LM, a model
    inheriting its model's ``forward``) is patched only where that family's file is patched too."""
    source = release.read(family.path)
    if source is None:
        raise Unrecognised(f"{family.path} is missing")
    verdict = DecoderTarget(family).examine(source, release, options)
    if verdict.state not in (State.UNPATCHED, State.PATCHED):
        raise Unrecognised(f"{family.path} is {verdict.state.value}: {verdict.reason}")
