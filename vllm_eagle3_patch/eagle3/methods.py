"""The speculative methods that read a target's hidden states: one table, and what a release says of each.

EAGLE-3 is one of several methods vLLM feeds with the residual stream at chosen layers.  Each asks the target for
the same interface (``supports_eagle3`` on the class the runner holds, then ``set_aux_hidden_state_layers``), so a
class this tool patches serves every one the release has.  What differs is the drafter: the config fields that
name its layers, and whether they name a layer's input (vLLM's ids) or its output (vLLM adds 1).  A new method is
one entry of :data:`METHODS`; whether a release has it, and whether its gate checks the target's model type for
it, is read from the release's speculative config (:func:`methods_in`), never from a version table.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from .release import DRAFTER_IDS_FIELD, GATE_SIGNS


@dataclass(frozen=True)
class LayerField:
    """A drafter-config field naming layers, and what vLLM adds to read them as its ids."""

    #: Dotted, as ``drafter_id_fields.IdField.name`` writes it (``dflash_config.target_layer_ids``).
    name: str
    #: 1 where the drafter names the layer whose output it reads (vLLM's id is one higher); 0 for vLLM's own ids.
    plus: int = 0


@dataclass(frozen=True)
class Method:
    """One speculative method that reads the target's hidden states."""

    #: ``speculative_config["method"]``.
    name: str
    #: What it does with the states, for a verdict ("drafts with an EAGLE-3 head").
    does: str
    #: The first vLLM release that has it: documentation only (the search decides; a test ties the two).
    since: str
    #: The drafter-config fields that name its layers, first match first, each in its convention (the one the
    #: newest runner reads it in: where an older runner differs, ``doctor`` reads that runner's code and says so).
    id_fields: tuple[LayerField, ...] = ()
    #: Words in a drafter config's keys or ``architectures`` that make it this method's drafter.
    drafter_signs: tuple[str, ...] = ()
    #: False where the method serves no drafter (it saves the states).
    drafts: bool = True


EAGLE3 = Method(
    "eagle3",
    "drafts with an EAGLE-3 head",
    "0.8.5",
    tuple(map(LayerField, (DRAFTER_IDS_FIELD, f"eagle_config.{DRAFTER_IDS_FIELD}", "eagle_config.layer_ids"))),
    drafter_signs=("Eagle3", "eagle_config"),
)
EXTRACT_HIDDEN_STATES = Method(
    "extract_hidden_states",
    "saves the states (training data for a drafter)",
    "0.17.0",
    (LayerField(DRAFTER_IDS_FIELD),),
    drafts=False,
)
DFLASH = Method(
    "dflash",
    "drafts a block at once with a DFlash drafter",
    "0.20.0",
    (
        LayerField("dflash_config.target_layer_ids", 1),
        LayerField("dflash_config.layer_ids"),
        LayerField("target_layer_ids", 1),
    ),
    drafter_signs=("DFlash", "dflash_config"),
)
DSPARK = Method(
    "dspark",
    "drafts with a DSpark drafter",
    "0.25.0",
    (LayerField("dspark_target_layer_ids", 1), LayerField("target_layer_ids", 1)),
    drafter_signs=("DSpark", "dspark"),
)
METHODS: tuple[Method, ...] = (EAGLE3, EXTRACT_HIDDEN_STATES, DFLASH, DSPARK)
"""Every method that reads the target's hidden states, in the order vLLM added them."""


@dataclass(frozen=True)
class MethodSupport:
    """A method as one release has it."""

    method: Method
    #: The speculative config's gate checks the target's model type for it (up to 0.21.x; none from 0.22.0).
    gated: bool


def methods_in(speculative_config: Optional[str]) -> tuple[MethodSupport, ...]:
    """The methods of :data:`METHODS` the release's speculative config (``Release.gate_file``'s source) names as
    string literals, and which of them its gate checks: those ``self.method`` is compared with in the test of the
    ``if`` that reads the whitelist or raises its refusal (``release.GATE_SIGNS``)."""
    source = speculative_config or ""
    gated = _gated(source)
    return tuple(
        MethodSupport(method, method.name in gated)
        for method in METHODS
        if f'"{method.name}"' in source or f"'{method.name}'" in source
    )


def _gated(source: str) -> frozenset[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_the_gate(node):
            names.update(_compared_with_method(node.test))
    return frozenset(names)


def _is_the_gate(node: ast.If) -> bool:
    """The ``if`` whose test reads the whitelist, or whose own body raises the gate's refusal."""
    raised = " ".join(ast.unparse(s) for s in node.body if isinstance(s, ast.Raise))
    return any(sign in ast.unparse(node.test) or sign in raised for sign in GATE_SIGNS)


def _compared_with_method(test: ast.expr) -> set[str]:
    """The strings ``self.method`` is compared with (``== "eagle3"``, ``in ("eagle3", "dflash")``) in ``test``."""
    found: set[str] = set()
    for node in ast.walk(test):
        if not (isinstance(node, ast.Compare) and ast.unparse(node.left) == "self.method"):
            continue
        for compared in node.comparators:
            found.update(
                n.value for n in ast.walk(compared) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    return found


def drafter_method(config: dict[str, object]) -> Method:
    """The method a drafter config is for: the first of :data:`METHODS` whose signs its keys or ``architectures``
    show (DFlash and DSpark drafters say so in both), else EAGLE-3."""
    architectures = config.get("architectures")
    words = (
        [*config, *(a for a in architectures if isinstance(a, str))] if isinstance(architectures, list) else [*config]
    )
    for method in METHODS:
        if method.drafts and method is not EAGLE3 and any(s in w for s in method.drafter_signs for w in words):
            return method
    return EAGLE3
