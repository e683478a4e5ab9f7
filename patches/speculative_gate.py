"""The speculative-config gate: let EAGLE-3 target the DeepSeek-V2/V3 family, Kimi-K2 and the other families.

Where ``SpeculativeConfig`` refuses an EAGLE-3 target whose model type it does not list, the types of
``gated_model_types`` (the catalog's) it lacks are added: appended to a whitelist (matched by substring), or a test
for ``"llama"`` alone becomes ``not any(supported in <model_type> for supported in ("llama", ...))``.  Everything
the gate accepted before is still accepted.  Which file holds the gate, in which shape, per release:
``docs/releases.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    append_items,
    assignment,
    cst,
    exactly_one,
    find,
    is_name,
    is_string,
    mark,
    mark_line,
    replace_child,
    replace_node,
    sole_statement,
    top_level_class,
)
from vllm_eagle3_patch.codemod.judge import judge
from vllm_eagle3_patch.codemod.outline import Function
from vllm_eagle3_patch.codemod.patch import Options, Policy, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.release import GATE_FILES, GATE_SIGNS, WHITELISTS, Release, gate_admits

CONFIG = "SpeculativeConfig"
READ_WORDS = (*GATE_SIGNS, "llama")
"""Words of the methods of ``SpeculativeConfig`` the codemod and the native check read: the gate's."""


def _is_whitelist(line: cst.SimpleStatementLine) -> bool:
    """``eagle3_target_supported = ["llama", ...]`` (or ``aux_hidden_states_supported``), alone on its line."""
    target, value = assignment(sole_statement(line)) or (None, None)
    return (
        is_name(target, *WHITELISTS)
        and isinstance(value, cst.List)
        and all(isinstance(e, cst.Element) and isinstance(e.value, cst.SimpleString) for e in value.elements)
    )


def _whitelist(line: cst.SimpleStatementLine) -> tuple[cst.BaseSmallStatement, cst.List]:
    """The assignment on a whitelist's line (:func:`_is_whitelist`) and its list."""
    statement = line.body[0]
    _, listed = assignment(statement) or (None, None)
    assert isinstance(listed, cst.List)
    return statement, listed


def _is_llama_only(comparison: cst.Comparison) -> bool:
    """``"llama" not in <model type>``"""
    return (
        is_string(comparison.left, "llama")
        and len(comparison.comparisons) == 1
        and isinstance(comparison.comparisons[0].operator, cst.NotIn)
    )


def _whitelists(config: cst.ClassDef) -> list[cst.SimpleStatementLine]:
    return find(config, cst.SimpleStatementLine, _is_whitelist)


def _not_accepted(line: cst.SimpleStatementLine, model_types: tuple[str, ...]) -> list[str]:
    """The ``model_types`` the whitelist on ``line`` rejects (its entries match by substring)."""
    _, whitelist = _whitelist(line)
    values = [e.value.evaluated_value for e in whitelist.elements if isinstance(e.value, cst.SimpleString)]
    listed = [v for v in values if isinstance(v, str)]  # all of them: string literals (:func:`_is_whitelist`)
    return [t for t in model_types if not any(entry in t for entry in listed)]


@dataclass(frozen=True)
class SpeculativeGate:
    """Add ``model_types`` to whichever EAGLE-3 target gate ``SpeculativeConfig`` has."""

    model_types: tuple[str, ...]
    """Every type the patched gate accepts besides the release's own: DeepSeek's first, then the families'."""

    def transform_module(self, tree: cst.Module) -> cst.Module:
        config = top_level_class(tree, CONFIG)
        whitelists = _whitelists(config)
        if whitelists:
            line = exactly_one(whitelists, "assignment of a list of model types to " + " or ".join(WHITELISTS))
            return replace_child(tree, config, replace_node(config, line, self.extend_whitelist(line)))
        gates = find(config, cst.If, lambda s: bool(find(s.test, cst.Comparison, _is_llama_only)))
        gate = exactly_one(gates, f'the EAGLE-3 gate (`{WHITELISTS[0]} = [...]` or `if ... "llama" not in ...`)')
        return replace_child(tree, config, replace_node(config, gate, self.open_llama_gate(gate)))

    def extend_whitelist(self, line: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        assign, listed = _whitelist(line)
        new = [cst.Element(cst.SimpleString(f'"{t}"')) for t in _not_accepted(line, self.model_types)]
        extended = listed.with_changes(elements=append_items(listed.elements, new))
        return mark_line(line.with_deep_changes(assign, value=extended))

    def open_llama_gate(self, gate: cst.If) -> cst.If:
        (comparison,) = find(gate.test, cst.Comparison, _is_llama_only)
        model_type = cst.Module([]).code_for_node(comparison.comparisons[0].comparator)
        accepted = ", ".join(f'"{t}"' for t in ("llama", *self.model_types))
        opened = cst.parse_expression(f"not any(supported in {model_type} for supported in ({accepted}))")
        test = replace_node(gate.test, comparison, opened)
        return mark(gate.with_changes(test=test))


def _native(module: cst.Module, source: str, model_types: tuple[str, ...]) -> Optional[str]:
    if "eagle3" in source and not any(sign in source for sign in GATE_SIGNS):
        return "no EAGLE-3 target whitelist in this release"
    for line in _whitelists(top_level_class(module, CONFIG)):
        if not _not_accepted(line, model_types):
            return "the EAGLE-3 whitelist already accepts DeepSeek-V2/V3, Kimi-K2 and every family's model type"
    return None


def _require_eagle3(source: str) -> Callable[[], None]:
    def check() -> None:
        if "eagle3" not in source:
            raise Unrecognised("this vLLM has no EAGLE-3 speculative config")

    return check


class SpeculativeGatePatch:
    name = "speculative-config gate"
    policy = Policy.BLOCKING
    serves = None
    default_path = GATE_FILES[0]
    serves_families: tuple[str, ...] = ()

    replanned = True
    """Planned from its original on every ``apply``: the types it admits follow the model files patched
    (an ``apply --only`` then a plain ``apply`` widens it)."""

    def __init__(self, model_types: tuple[str, ...]) -> None:
        self.model_types = model_types
        self.cache_key = repr(model_types)

    def locate(self, release: Release) -> Optional[str]:
        return release.gate_file

    def falls_short(self, source: str) -> tuple[str, ...]:
        """The model types this gate must admit that ``source``, a gate patched before, refuses as it stands
        (an ``apply --only`` left out, or another version of this tool wrote): not yet patched for them."""
        return tuple(t for t in self.model_types if not gate_admits(source, t))

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        return judge(
            source,
            lambda: SpeculativeGate(self.model_types),
            native=lambda module: _native(module, source, self.model_types),
            preconditions=_require_eagle3(source),
            reads=_reads_the_gate,
            classes=lambda name: name == CONFIG,
            sees=_reads_the_gate,
            layouts=release.layouts,
            sees_statement=lambda statement: _reads_a_gate_word(statement.text),
        )


def _reads_the_gate(function: Function) -> bool:
    """The methods of ``SpeculativeConfig`` the codemod and the native check read (the rest of the file, its
    dozens of fields with their docstrings too, is set aside unparsed)."""
    return function.cls == CONFIG and _reads_a_gate_word(function.text)


def _reads_a_gate_word(text: str) -> bool:
    """Whether ``text`` names a method or a model type the gate reads (what every part the codemod touches holds)."""
    return any(word in text for word in READ_WORDS)
