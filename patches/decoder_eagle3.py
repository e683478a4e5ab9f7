"""Make a decoder-only model family an EAGLE-3 target, from its :class:`~vllm_eagle3_patch.codemod.family.Family`.

The family's model ``__init__`` sets ``self.aux_hidden_state_layers``; its ``forward``, read once around the loop
found by its shape (``decoder_loop.read_forward``, ``eagle3/loop_shapes.py``), captures the residual stream entering
each requested global layer id and the last layer's output before the norm (id ``end_layer``), and returns
``(hidden_states, aux_hidden_states)`` when anything was captured.  The causal LM gains ``SupportsEagle3`` (where
the release has it) and both methods, under the names the release's runner calls (``eagle3/release.py``), so the
protocol's defaults never run; where upstream's own loop already captures, its capture gives way to this one, so
ids mean the same on every release (``docs/releases.md``).  A multimodal wrapper is ``wrapper_eagle3.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    add_base,
    add_import,
    add_methods,
    assigned,
    cst,
    exactly_one,
    find,
    has_method,
    is_name,
    is_self_attribute,
    leading_lines,
    mark,
    mark_header,
    mark_line,
    method,
    names_in,
    replace_child,
    replace_node,
    sole_statement,
    statements,
    top_level_class,
)
from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.judge import declares_eagle3, judge, reads_the_interfaces_import
from vllm_eagle3_patch.codemod.outline import Function, Statement
from vllm_eagle3_patch.codemod.patch import Options, SingleFilePatch, State, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.loop_shapes import LoopMatch
from vllm_eagle3_patch.eagle3.python_layout import Layouts
from vllm_eagle3_patch.eagle3.release import GETTER, GETTERS, MIXIN, PACKAGE, PROTOCOL, Release
from vllm_eagle3_patch.patches import pipeline_relay
from vllm_eagle3_patch.patches.decoder_loop import (
    DecoderForward,
    Loop,
    final_return,
    fresh,
    hands_on,
    layers_ignoring_the_residual,
    loop_shape,
    read_forward,
    residual_stream,
    upstream_capture,
    upstream_capture_statement,
)
from vllm_eagle3_patch.patches.eagle3_methods import eagle3_methods
from vllm_eagle3_patch.patches.pipeline_relay import MIXIN_RELAYS, NO_RELAY, OVER_PP, RELAYED, OverRanks
from vllm_eagle3_patch.patches.shared_embedding import SHARED_EMBEDDINGS, TOKEN_EMBEDDING, share_the_embedding

AUX = "aux_hidden_states"
INDEX = "aux_layer_idx"
WANTED = "aux_layer_ids"
"""A local copy of ``self.aux_hidden_state_layers``: the loop then pays ~30 ns a layer, not ~75."""


FRESH_MIXIN_CAPTURE = f"""\
def _maybe_add_hidden_state(self, aux_hidden_states, layer_idx, hidden_states, residual):
    \"\"\"{MIXIN}'s capture, but a copy where it would append the bare tensor the next layer writes into.\"\"\"
    if layer_idx in self.aux_hidden_state_layers:
        aux_hidden_states.append({fresh("hidden_states")} if residual is None else hidden_states + residual)
    return aux_hidden_states
"""
"""Upstream's collecting decoders append ``hidden_states`` itself where there is no residual (before the
first layer, and after every layer of a decoder whose layers take the stream alone); an in-place kernel of
the next layer then changes what the drafter gets.  The decoders this tool exposes override it."""


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
    with_model: bool = True
    """False where another family of the same file holds the same model and has patched it already."""
    layers_add_the_residual: bool = False
    """The model's layers take a residual but never read it (they add their own, EXAONE-4's post-norm layers):
    the ``hidden_states`` they return is the whole stream (see :func:`layers_ignoring_the_residual`)."""
    relay_key: Optional[str] = None
    """The release's key for aux states carried across pipeline ranks (``Eagle3Interface.relay_key``)."""
    inherits_relay: bool = False
    """The model runs ``family.forward_from``'s forward, which that family's patch makes carry them."""
    written_names: frozenset[str] = frozenset((AUX, INDEX, WANTED))
    """Of the names the capture introduces, those the file's text holds anywhere: a ``forward`` can only use those
    (the others need no walk of it to rule out)."""

    def transform_module(self, tree: cst.Module) -> cst.Module:
        model = top_level_class(tree, self.family.model)
        forward = self.own_forward(model)
        over_ranks = self.over_ranks(model, forward)
        if self.with_model:
            tree = replace_child(tree, model, self.patch_model(model, forward, tree, over_ranks == RELAYED))
        causal_lm = top_level_class(tree, self.family.causal_lm)
        loop = forward.loop if forward else None
        tree = replace_child(tree, causal_lm, self.patch_causal_lm(causal_lm, loop, over_ranks, tree))
        if self.protocol:
            tree = add_import(tree, f"{PACKAGE}.interfaces", PROTOCOL, PACKAGE)
        # last, so that a loop the codemod cannot follow is named first
        return share_the_embedding(tree, self.family)

    def own_forward(self, model: cst.ClassDef) -> Optional[DecoderForward]:
        """The model's own ``forward`` around its decoder loop, which this codemod patches; None where the
        model runs another's (``forward_from``, upstream's mixin) or keeps upstream's capture."""
        if self.family.forward_from or self.family.runs_upstream_capture or _collects_global_ids(model):
            return None
        return read_forward(model)

    def over_ranks(self, model: cst.ClassDef, forward: Optional[DecoderForward]) -> OverRanks:
        """Who will carry the aux states of ids on earlier pipeline ranks: this tool, where the release's
        runner carries them and the forward is this codemod's, over a stage's layers; else why nobody."""
        if self.relay_key is None:
            return NO_RELAY
        name = self.family.model
        if not self.with_model:  # another family of the file patched the model
            return RELAYED if pipeline_relay.declares_relay(model) else OverRanks.refused(f"{name} does not carry them")
        if self.family.runs_upstream_capture:
            return MIXIN_RELAYS
        if self.family.forward_from:
            inherited = f"{name} runs {self.family.forward_from.model}'s forward, which does not carry them"
            return RELAYED if self.inherits_relay else OverRanks.refused(inherited)
        if forward is None:  # upstream's collecting decoder, kept as it is (own_forward)
            return OverRanks.refused(f"{name} keeps upstream's capture, which does not carry them")
        lacking = pipeline_relay.why_not_relayed(model, forward)
        return RELAYED if lacking is None else OverRanks.refused(lacking)

    def patch_model(
        self, model: cst.ClassDef, forward: Optional[DecoderForward], tree: cst.Module, relays: bool = False
    ) -> cst.ClassDef:
        """``__init__`` sets the empty ids (unless upstream's does); ``forward`` captures, unless
        it is inherited from ``family.forward_from``'s model, which that family's file patches, or
        upstream's ``EagleModelMixin`` decoder already collects global ids (then only the causal LM
        lacks the protocol: Qwen3-Next on 0.20-0.23)."""
        if _collects_global_ids(model):
            return self.patch_collecting_model(model, tree)
        if self.family.runs_upstream_capture:
            if has_method(model, "forward"):
                raise Unrecognised(f"expected {model.name.value} to run its base's forward, not its own")
            return add_methods(model, FRESH_MIXIN_CAPTURE, tree)
        init = method(model, "__init__")
        new_model = model
        if not _sets_aux_layers(init):
            new_model = replace_child(new_model, init, self.patch_init(init, tree))
        if self.family.ids_on_the_class:
            new_model = _declare_empty_ids(new_model, tree)
        if self.family.forward_from is not None:
            _require_inherited_forward(model, self.family.forward_from.model)
        else:
            assert forward is not None, "own_forward reads every forward the model runs as its own"
            new_model = replace_child(new_model, forward.function, self.patch_forward(forward, tree, relays))
        if relays:
            new_model = _declare(new_model, pipeline_relay.declarations(self.relay_key or ""), tree)
            new_model = add_methods(new_model, pipeline_relay.methods(), tree)
        return new_model

    def patch_collecting_model(self, model: cst.ClassDef, tree: cst.Module) -> cst.ClassDef:
        """Upstream's collecting decoder, kept but for two things that make its ids this tool's:
        ``__init__`` sets the empty ids on the instance, and the capture before the loop names the
        stage's first layer by its global id (``self.start_layer``, 0 on the first rank) instead of 0,
        so a later pipeline stage captures the residual stream entering it under its own id."""
        init = method(model, "__init__")
        new_model = model if _sets_aux_layers(init) else replace_child(model, init, self.patch_init(init, tree))
        forward = method(new_model, "forward")
        new_model = replace_child(new_model, forward, _start_at_the_stage(forward, model.name.value))
        return add_methods(new_model, FRESH_MIXIN_CAPTURE, tree)

    def patch_init(self, init: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
        (reset,) = statements("self.aux_hidden_state_layers = tuple[int, ...]()\n", tree)
        return init.with_changes(body=init.body.with_changes(body=[*init.body.body, mark(reset)]))

    def patch_forward(self, forward: DecoderForward, tree: cst.Module, relays: bool = False) -> cst.FunctionDef:
        """``forward`` read around its decoder loop (``own_forward``), capturing."""
        model, loop = self.family.model, forward.loop
        collected = upstream_capture(loop)
        taken = names_in(forward.function) & self.written_names if self.written_names else set()
        if taken and collected is None:
            raise Unrecognised(f"{model}.forward already uses the name {sorted(taken)[0]!r}")
        state = residual_stream(loop, model, self.layers_add_the_residual)
        if collected is not None:
            return self.take_over_capture(forward, collected, state, tree)
        body, at, last_at = forward.body, forward.at, forward.last_at
        last = len(body) - 1  # the final return, which may itself call the norm
        returned = final_return(body, model)
        index = loop.global_id or INDEX

        collect, wanted = statements(f"{AUX} = []\n{WANTED} = self.aux_hidden_state_layers\n", tree)
        (capture,) = statements(f"if {index} in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (capture_last,) = statements(f"if {loop.end} in {WANTED}:\n    {AUX}.append({state})\n", tree)
        (early_return,) = statements(f"if {AUX}:\n    return {returned}, {AUX}\n", tree)
        received = [mark(s) for s in statements(pipeline_relay.receive(AUX), tree)] if relays else []
        between = forward.after_loop
        if relays:
            between = [pipeline_relay.send_on(s, AUX) if hands_on(s) else s for s in between]

        new_body = [
            *forward.before_loop,
            _move_leading_lines(body[at], mark(collect)),
            mark(wanted),
            self.capture_in_loop(loop, capture),
            *between,
            _move_leading_lines(body[last_at], mark(capture_last)),
            *([body[last_at].with_changes(leading_lines=()), *body[last_at + 1 : -1]] if last_at < last else []),
            *received,
            _move_leading_lines(body[-1], mark(early_return)) if last_at < last else mark(early_return),
            body[-1].with_changes(leading_lines=()),
        ]
        return forward.function.with_changes(body=forward.function.body.with_changes(body=new_body))

    def take_over_capture(
        self, forward: DecoderForward, collected: str, state: str, tree: cst.Module
    ) -> cst.FunctionDef:
        """Upstream's own loop already captures requested ids into ``collected`` (Arcee and Step-1 on
        0.17.x, Qwen3-Next on 0.18-0.19, whose causal LMs lack the methods): its capture gives way to this
        tool's, so that the ids mean the same as everywhere (global, and ``end_layer`` the last layer's
        pre-norm output) and every state is one nothing writes into later (upstream's appends the bare
        ``hidden_states`` before the first layer, or adds a ``None`` residual to it)."""
        loop, body, at, last_at = forward.loop, forward.body, forward.at, forward.last_at
        wanted = "self.aux_hidden_state_layers"
        (capture,) = statements(f"if {loop.global_id or INDEX} in {wanted}:\n    {collected}.append({state})\n", tree)
        (capture_last,) = statements(f"if {loop.end} in {wanted}:\n    {collected}.append({state})\n", tree)
        if loop.global_id is None and INDEX in self.written_names and INDEX in names_in(forward.function):
            raise Unrecognised(f"{self.family.model}.forward already uses the name {INDEX!r}")
        upstream = upstream_capture_statement(loop)
        without = loop.node.body.with_changes(body=[s for s in loop.node.body.body if s is not upstream])
        loop_node = self.capture_in_loop(replace(loop, node=loop.node.with_changes(body=without)), capture)
        new_body = [
            *forward.before_loop,
            _move_leading_lines(body[at], loop_node),
            *forward.after_loop,
            _move_leading_lines(body[last_at], mark(capture_last)),
            body[last_at].with_changes(leading_lines=()),
            *body[last_at + 1 :],
        ]
        return forward.function.with_changes(body=forward.function.body.with_changes(body=new_body))

    def capture_in_loop(self, loop: Loop, capture: cst.BaseStatement) -> cst.For:
        """The capture first in the loop body; ``for layer in X:`` becomes
        ``for aux_layer_idx, layer in enumerate(X, start=self.start_layer):``."""
        node = loop.node.with_changes(leading_lines=())
        body = node.body.with_changes(body=[mark(capture), *node.body.body])
        if loop.global_id is not None:
            return node.with_changes(body=body)
        no_space = cst.SimpleWhitespace("")
        start = cst.Arg(
            cst.parse_expression(loop.start),
            keyword=cst.Name("start"),
            equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space),
        )
        numbered = cst.Call(cst.Name("enumerate"), args=[cst.Arg(node.iter), *([start] if loop.pipelined else [])])
        inner = node.target
        if isinstance(inner, cst.Tuple) and not inner.lpar:  # for i, layer in enumerate(...): a nested pair
            inner = inner.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        target = cst.Tuple([cst.Element(cst.Name(INDEX)), cst.Element(inner)], lpar=[], rpar=[])
        return node.with_changes(target=target, iter=numbered, body=mark_header(body))

    def patch_causal_lm(
        self, causal_lm: cst.ClassDef, loop: Optional[Loop], over_ranks: OverRanks, tree: cst.Module
    ) -> cst.ClassDef:
        """The protocol and the two methods; their layer count reads the loop's layers (all of a staged
        model's ``layers`` where the forward is another's)."""
        if self.protocol and not any(is_name(base.value, PROTOCOL) for base in causal_lm.bases):
            causal_lm = add_base(causal_lm, PROTOCOL)
        layers, pipelined = (loop.layers, loop.pipelined) if loop else ("layers", True)
        methods = eagle3_methods(self.family.decoder, self.aux_layers, self.getter, layers, pipelined, over_ranks)
        return add_methods(causal_lm, methods, tree)


def _collects_global_ids(model: cst.ClassDef) -> bool:
    """Whether ``model`` is upstream's collecting decoder: an ``EagleModelMixin`` whose ``forward``
    captures id 0 before its loop and ``i + 1`` after layer ``i``, ``i`` counted from
    ``self.start_layer`` (global ids: this tool's semantics, id ``n`` included)."""
    if not any(is_name(base.value, MIXIN) for base in model.bases):
        return False
    forward = method(model, "forward")
    captures = find(forward, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
    loops = [loop for loop in find(forward, cst.For) if _numbers_the_stage(loop_shape(loop))]
    if not captures or len(loops) != 1:
        raise Unrecognised(
            f"{model.name.value} inherits {MIXIN}, but its forward does not capture with "
            "self._maybe_add_hidden_state in a loop enumerated from self.start_layer"
        )
    return True


def _numbers_the_stage(shape: Optional[LoopMatch]) -> bool:
    """A loop over the stage's layers whose own name holds their global ids (counted from ``self.start_layer``)."""
    return shape is not None and shape.pipelined and shape.global_id is not None


def _start_at_the_stage(forward: cst.FunctionDef, model: str) -> cst.FunctionDef:
    """``self._maybe_add_hidden_state([], 0, ...)`` before the loop -> ``(..., self.start_layer, ...)``."""

    def first_capture(line: cst.SimpleStatementLine) -> bool:
        calls = find(line, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
        return len(calls) == 1 and len(calls[0].args) >= 2 and isinstance(calls[0].args[1].value, cst.Integer)

    line = exactly_one(find(forward, cst.SimpleStatementLine, first_capture), f"the id-0 capture before {model}'s loop")
    (call,) = find(line, cst.Call, lambda call: is_self_attribute(call.func, "_maybe_add_hidden_state"))
    first = call.args[1].value  # an integer (``first_capture``)
    if not isinstance(first, cst.Integer) or first.value != "0":
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
    """``aux_hidden_state_layers: tuple[int, ...] = ()``: what a subclass that never runs this
    ``__init__`` reads in ``forward``."""
    return _declare(model, "aux_hidden_state_layers: tuple[int, ...] = ()\n", tree)


def _declare(model: cst.ClassDef, code: str, tree: cst.Module) -> cst.ClassDef:
    """The class attributes in ``code`` first in the class body (after its docstring), marked."""
    declared = [mark(line) for line in statements(code, tree)]
    body = list(model.body.body)
    at = 1 if body and _is_docstring(body[0]) else 0
    return model.with_changes(body=model.body.with_changes(body=[*body[:at], *declared, *body[at:]]))


def _is_docstring(statement: cst.CSTNode) -> bool:
    small = sole_statement(statement)
    return isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))


def _move_leading_lines(source: cst.BaseStatement, target: cst.BaseStatement) -> cst.BaseStatement:
    """Inserted statements take over the blank lines and comments above the one they precede."""
    return target.with_changes(leading_lines=leading_lines(source))


# --------------------------------------------------------------------------- the release


class DecoderPatch(SingleFilePatch):
    """A family's model file: optional (left alone where it cannot be patched) unless the family is required.

    Families found by rule (``discovery.py``) may share a file: each causal LM of the file is one
    family, and a model held by several of them is patched once.
    """

    def __init__(self, family: Family, *more: Family) -> None:
        self.family = family
        self.families = (family, *more)
        self.name = f"{family.name} model" + (f" (and {len(more)} more)" if more else "")
        self.path = family.path
        self.policy = family.policy
        self.serves = family.name

    @property
    def serves_families(self) -> tuple[str, ...]:
        return tuple(family.name for family in self.families)

    @property
    def cache_key(self) -> str:
        return repr(self.families)

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        read = FileReading.of(self.families, source, release.layouts)
        return judge(
            source,
            lambda: file_codemod(self.families, source=source, release=release, options=options),
            native=lambda module: native_reason(module, self.families),
            reads=read.reads,
            classes=read.looks_at,
            sees=read.sees,
            layouts=release.layouts,
            sees_statement=read.sees_statement,
            reads_statement=read.reads_statement,
        )


def native_reason(module: cst.Module, families: tuple[Family, ...]) -> Optional[str]:
    """What the runner checks: the causal LM it holds is an EAGLE-3 target.  A collecting decoder under
    a causal LM without the protocol is half of it (the codemod adds the rest)."""
    reasons = [declares_eagle3(module, family.causal_lm, (PROTOCOL,)) for family in families]
    return reasons[0] if all(reasons) else None


@dataclass(frozen=True)
class FileReading:
    """What of a model file the codemod and :func:`native_reason` look at; ``judge`` sets the rest aside
    unparsed (``codemod/outline.py``)."""

    models: frozenset[str]
    causal_lms: frozenset[str]
    nested: bool
    """A decoder held two attributes deep (``self.transformer.decoder``), whose outer model is found later
    (``shared_embedding._outer_model``): every ``__init__`` is read."""
    outer: Optional[frozenset[str]] = None
    """Where ``nested``: the file's classes the causal LMs' text names, among them the one it builds to hold the
    decoder (None: every class, where the file's layout is not known)."""

    @classmethod
    def of(cls, families: tuple[Family, ...], source: str = "", layouts: Optional[Layouts] = None) -> FileReading:
        causal_lms = frozenset(family.causal_lm for family in families)
        nested = any(family.decoder.count(".") >= 2 for family in families)
        return cls(
            models=frozenset(family.model for family in families),
            causal_lms=causal_lms,
            nested=nested,
            outer=layouts.classes_named_in(source, causal_lms) if nested and layouts is not None else None,
        )

    def reads(self, function: Function) -> bool:
        if function.name == "__init__" and (self.nested or function.cls in self.causal_lms):
            return True  # what the causal LM holds, and the embedding of the model it builds
        return function.cls in self.models and function.name in ("__init__", "forward")

    def looks_at(self, cls: str) -> bool:
        if cls in self.models or cls in self.causal_lms:
            return True
        return self.nested and (self.outer is None or cls in self.outer)

    def sees(self, function: Function) -> bool:
        """The methods whose presence the codemods ask (``has_method``/``method``); the others are set aside."""
        return self.nested or function.name in SEEN_METHODS

    def reads_statement(self, function: Function, text: str) -> bool:
        """Of an ``__init__`` read, the lines :data:`READ_IN_INIT` names (every one, where the decoder sits deeper:
        ``shared_embedding._outer_model`` reads what builds it)."""
        return self.nested or _READ_IN_INIT.search(text) is not None

    def sees_statement(self, statement: Statement) -> bool:
        """The interfaces import, and the class attribute saying a model carries aux states across ranks."""
        return reads_the_interfaces_import(statement) or (statement.cls is not None and OVER_PP in statement.text)


READ_IN_INIT = ("start_layer", "config", "aux_hidden_state_layers", "model", *SHARED_EMBEDDINGS)
"""The attributes of ``self`` whose assignments in an ``__init__`` the codemods of a model file read, each where:
``start_layer`` (a staged loop: ``decoder_loop.read_forward``), ``config`` (``pipeline_relay.why_not_relayed``),
``aux_hidden_state_layers`` (upstream's ids: :func:`_sets_aux_layers`), ``model`` (something other than the
decoder held there: ``shared_embedding``), the shared embeddings and any ``TOKEN_EMBEDDING`` built
(``shared_embedding._built_embeddings``).  Its other statements (an ``if`` block whose text names none of them
too) are set aside unparsed."""
_READ_IN_INIT = re.compile(rf"\bself\s*\.\s*(?:{'|'.join(READ_IN_INIT)})\b|\b{TOKEN_EMBEDDING}\b")

SEEN_METHODS = frozenset(("__init__", "forward", "model", *SHARED_EMBEDDINGS, *GETTERS))
"""Every method name a codemod of a model file or its native check looks for."""


def file_codemod(families: tuple[Family, ...], *, source: str, release: Release, options: Options) -> FileCodemod:
    """The codemod of every family of the file.  Raises :class:`Unrecognised` where a family's
    ``forward_from`` file is not patchable (checked first), or the release has no EAGLE-3."""
    parents = {
        family.name: require_patchable(family.forward_from, release, options)
        for family in families
        if family.forward_from is not None
    }
    interface = release.interface
    if interface is None:
        raise Unrecognised(release.no_eagle3)
    return FileCodemod(
        tuple(
            DecoderEagle3(
                family=family,
                protocol=interface.protocol,
                aux_layers=options.aux_layers,
                getter=interface.getter,
                with_model=with_model,
                layers_add_the_residual=_layers_ignore_residual(source, family.model, release.layouts),
                relay_key=interface.relay_key,
                written_names=frozenset(name for name in (AUX, INDEX, WANTED) if name in source),
                inherits_relay=(
                    interface.relay_key is not None
                    and family.name in parents
                    and parents[family.name].carries_aux_across_ranks
                ),
            )
            for family, with_model in zip(families, _first_of_each_model(families))
        )
    )


def _layers_ignore_residual(source: str, model: str, layouts: Layouts) -> bool:
    try:
        return layers_ignoring_the_residual(source, model, layouts)
    except SyntaxError:
        return False


@dataclass(frozen=True)
class FileCodemod:
    """The codemods of every family of one file, one after the other."""

    codemods: tuple[DecoderEagle3, ...]

    def transform_module(self, tree: cst.Module) -> cst.Module:
        for codemod in self.codemods:
            tree = codemod.transform_module(tree)
        return tree


def _first_of_each_model(families: tuple[Family, ...]) -> list[bool]:
    """For each family, whether it is the first to hold its model (and so patches it)."""
    seen: set[str] = set()
    firsts = []
    for family in families:
        firsts.append(family.model not in seen)
        seen.add(family.model)
    return firsts


@dataclass(frozen=True)
class PatchableFile:
    """A family's model file that another file's patch relies on, and its verdict."""

    source: str
    verdict: Verdict

    @property
    def carries_aux_across_ranks(self) -> bool:
        """Whether the file as ``apply`` leaves it declares that its model carries aux states across
        pipeline ranks (what a model running its ``forward`` inherits)."""
        written = self.verdict.patched if self.verdict.state is State.UNPATCHED else self.source
        return pipeline_relay.carries_aux_across_ranks(written or "")


def require_patchable(family: Family, release: Release, options: Options) -> PatchableFile:
    """A file whose patch relies on ``family``'s (a wrapper delegating to its causal LM, a model
    inheriting its model's ``forward``) is patched only where that family's file is patched too."""
    source = release.read(family.path)
    if source is None:
        raise Unrecognised(f"{family.path} is missing")
    verdict = DecoderPatch(family).examine(source, release, options)
    if verdict.state not in (State.UNPATCHED, State.PATCHED):
        raise Unrecognised(f"{family.path} is {verdict.state.value}: {verdict.reason}")
    return PatchableFile(source, verdict)
