"""``model_executor/models/deepseek_v2.py``: DeepSeek-V2/V3 (Kimi-K2 too) become EAGLE-3 targets.

``DeepseekV2Model.forward`` collects the residual stream at the requested global layer
ids, and ``DeepseekV2ForCausalLM`` (so every subclass: V3, V3.2, Kimi-K2, ...) gains the
``SupportsEagle3`` protocol and its two methods, as upstream did in vLLM 0.18.0 and with
its two gaps closed: id 0 on the first rank (no residual yet) and id ``n`` (the output of
the last layer) both work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.patches._eagle3_methods import eagle3_methods

from vllm_eagle3_patch.codemod import implements_eagle3, judge
from vllm_eagle3_patch.cst_tools import (
    add_base,
    add_import,
    add_methods,
    assigned,
    cst,
    find,
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
    sole_statement,
    statements,
    top_level_class,
)
from vllm_eagle3_patch.target import Options, ReadFile, SingleFileTarget, Unrecognised, Verdict

PATH = "model_executor/models/deepseek_v2.py"
PACKAGE = "vllm.model_executor.models"
"""The file's package, against which its relative ``from .interfaces import ...`` resolves."""
INTERFACES = "model_executor/models/interfaces.py"
RUNNER = "v1/worker/gpu_model_runner.py"
MODEL = "DeepseekV2Model"
CAUSAL_LM = "DeepseekV2ForCausalLM"
PROTOCOL = "SupportsEagle3"
AUX = "aux_hidden_states"
INDEX = "aux_layer_idx"
WANTED = "aux_layer_ids"
"""A local copy of ``self.aux_hidden_state_layers``: the loop then pays ~30 ns a layer, not ~75."""


@dataclass(frozen=True)
class DeepseekV2Eagle3:
    """Add EAGLE-3 aux hidden state collection to ``DeepseekV2Model``/``DeepseekV2ForCausalLM``.

    ``protocol``: add ``SupportsEagle3`` to the bases (releases before 0.10.1 have no
    protocol; their runner calls the methods by name).  ``aux_layers``: fixed ids for
    ``get_eagle3_aux_hidden_state_layers`` instead of upstream's ``(2, n // 2, n - 3)``.
    """

    protocol: bool = True
    aux_layers: Optional[tuple[int, ...]] = None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        model = top_level_class(tree, MODEL)
        causal_lm = top_level_class(tree, CAUSAL_LM)
        init, forward = method(model, "__init__"), method(model, "forward")
        new_model = replace_child(model, init, self.patch_init(init, tree))
        new_model = replace_child(new_model, forward, self.patch_forward(forward, tree))
        tree = replace_child(tree, model, new_model)
        tree = replace_child(tree, causal_lm, self.patch_causal_lm(causal_lm, tree))
        if self.protocol:
            tree = add_import(tree, f"{PACKAGE}.interfaces", PROTOCOL, PACKAGE)
        return tree

    def patch_init(self, init: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
        (reset,) = statements("self.aux_hidden_state_layers = tuple[int, ...]()\n", tree)
        return init.with_changes(body=init.body.with_changes(body=[*init.body.body, mark_line(reset)]))

    def patch_forward(self, forward: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
        taken = names_in(forward) & {AUX, INDEX, WANTED}
        if taken:
            raise Unrecognised(f"{MODEL}.forward already uses the name {sorted(taken)[0]!r}")
        body = list(forward.body.body)
        loop_at = body.index(_decoder_loop(body))
        loop: cst.For = body[loop_at]  # type: ignore[assignment]
        hidden, residual = _layer_call_names(loop)
        norm_at = _norm_call_index(body, after=loop_at)
        returned = _final_return(body)
        state = f"{hidden} if {residual} is None else {hidden} + {residual}"

        collect, wanted = statements(f"{AUX} = []\n{WANTED} = self.aux_hidden_state_layers\n", tree)
        (capture,) = statements(f"if {INDEX} in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (capture_last,) = statements(f"if self.end_layer in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (early_return,) = statements(f"if {AUX}:\n    return {returned}, {AUX}\n", tree)

        new_body = [
            *body[:loop_at],
            _move_leading_lines(body[loop_at], mark_line(collect)),
            mark_line(wanted),
            self.enumerate_layers(loop.with_changes(leading_lines=()), capture),
            *body[loop_at + 1 : norm_at],
            _move_leading_lines(body[norm_at], mark(capture_last)),
            body[norm_at].with_changes(leading_lines=()),
            *body[norm_at + 1 : -1],
            _move_leading_lines(body[-1], mark(early_return)),
            body[-1].with_changes(leading_lines=()),
        ]
        return forward.with_changes(body=forward.body.with_changes(body=new_body))

    def enumerate_layers(self, loop: cst.For, capture: cst.BaseStatement) -> cst.For:
        """``for layer in X:`` -> ``for aux_layer_idx, layer in enumerate(X, start=self.start_layer):``"""
        no_space = cst.SimpleWhitespace("")
        start = cst.Arg(
            cst.parse_expression("self.start_layer"),
            keyword=cst.Name("start"),
            equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space),
        )
        numbered = cst.Call(cst.Name("enumerate"), args=[cst.Arg(loop.iter), start])
        target = cst.Tuple([cst.Element(cst.Name(INDEX)), cst.Element(loop.target)], lpar=[], rpar=[])
        body = loop.body.with_changes(body=[mark(capture), *loop.body.body])
        return loop.with_changes(target=target, iter=numbered, body=mark_header(body))

    def patch_causal_lm(self, causal_lm: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
        if self.protocol:
            causal_lm = add_base(causal_lm, PROTOCOL)
        return add_methods(causal_lm, eagle3_methods("self.model", self.aux_layers), tree)


def _decoder_loop(body: list[cst.BaseStatement]) -> cst.For:
    loops = [s for s in body if isinstance(s, cst.For) and _iterates_own_layers(s.iter)]
    what = f"a loop over self.layers from self.start_layer to self.end_layer at the top of {MODEL}.forward"
    return only(loops, what)  # type: ignore[return-value]


def _iterates_own_layers(iterable: cst.BaseExpression) -> bool:
    """``islice(self.layers, self.start_layer, self.end_layer)`` or ``self.layers[self.start_layer:self.end_layer]``."""
    if isinstance(iterable, cst.Call) and (is_name(iterable.func, "islice") or is_attribute(iterable.func, "islice")):
        args = [arg.value for arg in iterable.args]
        return len(args) == 3 and all(is_self_attribute(a, n) for a, n in zip(args, ("layers", "start_layer", "end_layer")))
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


def _layer_call_names(loop: cst.For) -> tuple[str, str]:
    """The names the layer call assigns: ``hidden_states, residual = layer(...)``."""
    if not isinstance(loop.target, cst.Name):
        raise Unrecognised(f"expected the {MODEL}.forward loop to name one layer (for layer in ...)")
    layer = loop.target.value
    calls = [s for s in loop.body.body if _assigns_pair_from_call(sole_statement(s), layer)]
    line: cst.SimpleStatementLine = only(calls, f"the decoder layer call `hidden_states, residual = {layer}(...)`")  # type: ignore[assignment]
    hidden, residual = (e.value.value for e in line.body[0].targets[0].target.elements)  # type: ignore[attr-defined]
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


def _norm_call_index(body: list[cst.BaseStatement], after: int) -> int:
    for index in range(after + 1, len(body)):
        if find(body[index], cst.Call, lambda call: is_self_attribute(call.func, "norm")):
            return index
    raise Unrecognised(f"expected a call to self.norm after the decoder loop in {MODEL}.forward")


def _final_return(body: list[cst.BaseStatement]) -> str:
    returned = sole_statement(body[-1])
    if isinstance(returned, cst.Return) and isinstance(returned.value, cst.Name):
        return returned.value.value
    raise Unrecognised(f"expected {MODEL}.forward to end with `return <hidden states>`")


def _move_leading_lines(source: cst.BaseStatement, target: cst.BaseStatement) -> cst.BaseStatement:
    """Inserted statements take over the blank lines and comments above the one they precede."""
    return target.with_changes(leading_lines=source.leading_lines)  # type: ignore[attr-defined]


def _no_eagle3_in_release(read: ReadFile) -> None:
    runner = read(RUNNER) or ""
    if "set_aux_hidden_state_layers" not in runner:
        raise Unrecognised(f"this vLLM has no EAGLE-3 ({RUNNER} never calls set_aux_hidden_state_layers)")


def _has_protocol(read: ReadFile) -> bool:
    return re.search(rf"^class {PROTOCOL}\b", read(INTERFACES) or "", re.MULTILINE) is not None


class DeepseekV2Target(SingleFileTarget):
    name = "DeepSeek-V2/V3 model"
    path = PATH
    required = True
    """A vLLM without this file cannot serve DeepSeek at all: unsupported, not "nothing to do"."""

    def examine(self, source: str, read: ReadFile, options: Options) -> Verdict:
        return judge(
            source,
            lambda: DeepseekV2Eagle3(protocol=_has_protocol(read), aux_layers=options.aux_layers),
            native=lambda module: implements_eagle3(module, CAUSAL_LM),
            preconditions=lambda: _no_eagle3_in_release(read),
            reads=lambda function: function.cls == MODEL and function.name in ("__init__", "forward"),
        )


TARGET = DeepseekV2Target()
