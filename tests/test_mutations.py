"""Property tests: mutate the real ``deepseek_v2.py`` of several releases; the tool either
writes a patch that compiles and behaves, or refuses. Never a broken file.

The behaviour check runs the *patched* ``DeepseekV2Model.forward`` itself, lifted out of
the file, on plain numbers with stand-in layers (no torch needed), against a reference.
"""

from __future__ import annotations

import ast
import re
import textwrap
import types
from functools import cache
from itertools import islice

import pytest
from helpers.lifting import Number, lift_method
from helpers.wheel_corpus import release_tree
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vllm_eagle3_patch.catalog import DEEPSEEK_V2, FAMILIES, gated_model_types
from vllm_eagle3_patch.codemod.patch import Options, State, Verdict
from vllm_eagle3_patch.eagle3.class_chain import ChainReader
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.multimodal import Refused, find_wrapper
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderPatch
from vllm_eagle3_patch.patches.speculative_gate import SpeculativeGatePatch
from vllm_eagle3_patch.patches.wrapper_eagle3 import FoundWrappersPatch

RELEASES = ("0.10.1", "0.13.0", "0.17.1")
PATH = "model_executor/models/deepseek_v2.py"


PATCH = DecoderPatch(DEEPSEEK_V2)
GATE_PATCH = SpeculativeGatePatch(gated_model_types())


@cache
def reader(version: str) -> Release:
    """The release's tree, read once and only when a test asks: collecting this module downloads nothing."""
    return Release(release_tree(version) / "vllm")


def source_of(version: str) -> str:
    return reader(version).read(PATH) or ""


LOOP = re.compile(
    r"^([ \t]+)for layer in "
    r"(islice\(self\.layers, self\.start_layer, self\.end_layer\)|self\.layers\[self\.start_layer:self\.end_layer\]):$",
    re.M,
)


def forward_block(source: str) -> tuple[int, int]:
    """The character span of ``DeepseekV2Model.forward`` in ``source``."""
    start = source.index("class DeepseekV2Model(")
    body = re.compile(r"^[ \t]+def forward\(", re.M).search(source, start).start()
    end = source.index("\nclass ", body)
    return body, end


def need(condition: bool) -> None:
    """Discard a generated case whose mutation does not apply to this release's text."""
    if not condition:
        assume(False)


# Mutations a file might really go through (a local patch, a formatter, an editor), each
# either harmless to the codemod or a structure it must refuse.
def rename_loop_variable(s: str) -> str:
    match = LOOP.search(s)
    need(match is not None)
    body, end = forward_block(s)
    block = re.sub(r"\blayer\b", "block", s[body:end])
    return s[:body] + block + s[end:]


def comment_and_blank_lines_in_forward(s: str) -> str:
    match = LOOP.search(s)
    need(match is not None)
    indent = match.group(1)
    return s[: match.start()] + f"{indent}# run the decoder layers\n\n" + s[match.start() :]


def crlf(s: str) -> str:
    return s.replace("\n", "\r\n")


def tabs(s: str) -> str:
    return re.sub(r"^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), s, flags=re.M)


def decorate_causal_lm(s: str) -> str:
    return s.replace("\nclass DeepseekV2ForCausalLM(", "\n@(lambda cls: cls)\nclass DeepseekV2ForCausalLM(", 1)


def reorder_bases(s: str) -> str:
    match = re.search(r"class DeepseekV2ForCausalLM\(([^)]*)\):", s)
    need(match is not None)
    bases = [b.strip() for b in match.group(1).split(",") if b.strip()]
    need(len(bases) >= 3)
    reordered = [bases[0], *reversed(bases[1:])]
    return s[: match.start(1)] + ", ".join(reordered) + s[match.end(1) :]


def reshape_interfaces_import(s: str) -> str:
    match = re.search(r"^from \.interfaces import ([^(\n]+)$", s, re.M)
    need(match is not None)
    names = [n.strip() for n in match.group(1).split(",")]
    block = "from .interfaces import (\n" + "".join(f"    {n},\n" for n in names) + ")"
    return s[: match.start()] + block + s[match.end() :]


def duplicate_model_class(s: str) -> str:
    return s + "\n\nclass DeepseekV2Model:\n    pass\n"


def remove_loop(s: str) -> str:
    match = LOOP.search(s)
    need(match is not None)
    return s[: match.start()] + f"{match.group(1)}for layer in self.layers:" + s[match.end() :]


def nest_loop(s: str) -> str:
    match = LOOP.search(s)
    need(match is not None)
    indent = match.group(1)
    line_end = s.index("\n", match.end())
    body_end = s.index("\n\n", line_end)
    loop = s[match.start() : body_end]
    unit = "\t" if indent.startswith("\t") else "    "
    nested = f"{indent}if True:\n" + textwrap.indent(loop, unit)
    return s[: match.start()] + nested + s[body_end:]


HARMLESS = [
    rename_loop_variable,
    comment_and_blank_lines_in_forward,
    crlf,
    tabs,
    decorate_causal_lm,
    reorder_bases,
    reshape_interfaces_import,
]
REFUSED = [duplicate_model_class, remove_loop, nest_loop]
"""A renamed norm is no longer refused: the last layer's output is then captured right after the loop
(``tests/codemods/test_decoder_loop.py`` runs that shape)."""


# ---------------------------------------------------------------- running the patched forward


def lift_forward(source: str) -> dict:
    """``DeepseekV2Model.forward`` of ``source`` in a namespace whose ``get_pp_group`` ``run`` sets."""
    namespace = {"islice": islice, "IntermediateTensors": dict, "get_pp_group": None}
    lift_method(source, "DeepseekV2Model", "forward", namespace)
    return namespace


def run(namespace, ids, start, end, first, last, n_layers=8):
    """The lifted forward on numbers: layer i maps (h, r) to (h * (i + 2), (r or 0) + h)."""

    def layer(index):
        return lambda positions, h, r, *extra: (h * (index + 2), h if r is None else r + h)

    group = types.SimpleNamespace(is_first_rank=first, is_last_rank=last)
    namespace["get_pp_group"] = lambda: group
    model = types.SimpleNamespace(
        layers=[layer(i) for i in range(n_layers)],
        start_layer=start,
        end_layer=end,
        norm=lambda h, r: (h + r, None),
        config=types.SimpleNamespace(),
        aux_hidden_state_layers=ids,
        embed_input_ids=lambda input_ids: Number(1.0),
    )
    state = None if first else {"hidden_states": 3.0, "residual": 5.0}
    return namespace["forward"](model, None, None, state, Number(1.0) if first else None)


def reference(ids, start, end, first, last):
    h, r = (1.0, None) if first else (3.0, 5.0)
    captured = []
    for index in range(start, end):
        if index in ids:
            captured.append(h if r is None else h + r)
        h, r = h * (index + 2), (h if r is None else r + h)
    if not last:
        return {"hidden_states": h, "residual": r}
    if end in ids:
        captured.append(h + r)
    return (h + r, captured) if captured else h + r


STAGES = [(0, 8, True, True), (0, 4, True, False), (4, 8, False, True), (2, 6, False, False)]


def assert_behaves(patched: str) -> None:
    namespace = lift_forward(patched)
    for start, end, first, last in STAGES:
        for ids in [(), (0,), (0, 3, 8), (8, 1), (5,), (4,), (6,)]:
            assert run(namespace, ids, start, end, first, last) == reference(ids, start, end, first, last), (
                ids,
                start,
                end,
            )


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(RELEASES),
    mutations=st.lists(st.sampled_from(HARMLESS + REFUSED), min_size=1, max_size=3, unique=True),
)
def test_mutated_sources_are_patched_correctly_or_refused(version, mutations):
    source = source_of(version)
    for mutate in sorted(mutations, key=lambda m: m is crlf):  # the others write "\n"
        source = mutate(source)
    verdict = PATCH.examine(source, reader(version), Options())
    if verdict.state is State.UNSUPPORTED:
        assert verdict.patched is None and verdict.reason
        return
    assert verdict.state is State.UNPATCHED, verdict
    assert not any(m in REFUSED for m in mutations), f"{[m.__name__ for m in mutations]} should have been refused"
    compile(verdict.patched, PATH, "exec")
    assert_behaves(verdict.patched)
    assert PATCH.examine(verdict.patched, reader(version), Options()).state is State.PATCHED
    if crlf in mutations:
        assert verdict.patched.count("\n") == verdict.patched.count("\r\n")


@pytest.mark.parametrize("mutate", HARMLESS, ids=lambda f: f.__name__)
def test_each_harmless_mutation_is_patched(mutate):
    verdict = PATCH.examine(mutate(source_of("0.17.1")), reader("0.17.1"), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    assert_behaves(verdict.patched)


@pytest.mark.parametrize("mutate", REFUSED, ids=lambda f: f.__name__)
def test_each_structural_mutation_is_refused(mutate):
    assert PATCH.examine(mutate(source_of("0.17.1")), reader("0.17.1"), Options()).state is State.UNSUPPORTED


def test_the_behaviour_check_catches_a_wrong_patch():
    """The lifted-forward check is not vacuous: an off-by-one capture fails it."""
    patched = PATCH.examine(source_of("0.17.1"), reader("0.17.1"), Options()).patched
    broken = patched.replace("start=self.start_layer)", "start=self.start_layer + 1)")
    assert broken != patched
    with pytest.raises(AssertionError):
        assert_behaves(broken)


# ---------------------------------------------------------------- the other patched files

KIMI = "model_executor/models/kimi_k25.py"
GATE = "config/speculative.py"
KIMI_RELEASES = ("0.15.0", "0.17.1")


def reshape_any_interfaces_import(s: str) -> str:
    """Single line <-> parenthesised, whichever the file has."""
    single = re.search(r"^from vllm\.model_executor\.models\.interfaces import ([^(\n]+)$", s, re.M)
    if single:
        names = [n.strip() for n in single.group(1).split(",")]
        block = "from vllm.model_executor.models.interfaces import (\n" + "".join(f"    {n},\n" for n in names) + ")"
        return s[: single.start()] + block + s[single.end() :]
    multi = re.search(r"^from vllm\.model_executor\.models\.interfaces import \(([^)]*)\)", s, re.M)
    need(multi is not None)
    names = [n.strip() for n in multi.group(1).split(",") if n.strip()]
    return (
        s[: multi.start()] + "from vllm.model_executor.models.interfaces import " + ", ".join(names) + s[multi.end() :]
    )


def reorder_wrapper_bases(s: str) -> str:
    match = re.search(r"class KimiK25ForConditionalGeneration\(([^)]*)\):", s)
    need(match is not None)
    bases = [b.strip() for b in match.group(1).split(",") if b.strip()]
    return s[: match.start(1)] + ", ".join([bases[0], *reversed(bases[1:])]) + s[match.end(1) :]


def decorate_wrapper(s: str) -> str:
    return s.replace(
        "\nclass KimiK25ForConditionalGeneration(", "\n@(lambda cls: cls)\nclass KimiK25ForConditionalGeneration(", 1
    )


def duplicate_wrapper(s: str) -> str:
    return s + "\n\nclass KimiK25ForConditionalGeneration:\n    pass\n"


def rename_language_model(s: str) -> str:
    need("self.language_model = " in s)
    return s.replace("self.language_model = ", "self.text_model = ")


KIMI_HARMLESS = [crlf, tabs, reshape_any_interfaces_import, reorder_wrapper_bases, decorate_wrapper]
KIMI_REFUSED = [duplicate_wrapper, rename_language_model]


def assert_wrapper_delegates(patched: str) -> None:
    """Both methods reach the language model, as a DeepseekV2ForCausalLM (0.16+) or a bare decoder (0.15)."""
    setter = lift_method(patched, "KimiK25ForConditionalGeneration", "set_aux_hidden_state_layers", {})
    getter = lift_method(patched, "KimiK25ForConditionalGeneration", "get_eagle3_aux_hidden_state_layers", {})
    calls: list = []
    inner = types.SimpleNamespace(
        set_aux_hidden_state_layers=calls.append,
        get_eagle3_aux_hidden_state_layers=lambda: (7, 8, 9),
        aux_hidden_state_layers=(),
        start_layer=0,
        layers=[None] * 61,
    )
    wrapper = types.SimpleNamespace(language_model=inner)
    setter(wrapper, (4, 5))
    assert calls == [(4, 5)] or inner.aux_hidden_state_layers == (4, 5)
    assert getter(wrapper) in ((7, 8, 9), (2, 30, 58))


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(KIMI_RELEASES),
    mutations=st.lists(st.sampled_from(KIMI_HARMLESS + KIMI_REFUSED), min_size=1, max_size=3, unique=True),
)
def test_mutated_kimi_wrappers_delegate_or_are_refused(version, mutations):
    source = reader(version).read(KIMI)
    for mutate in sorted(mutations, key=lambda m: m is crlf):
        source = mutate(source)
    verdict = kimi_verdict(version, source)
    if verdict is None or verdict.state is State.UNSUPPORTED:  # the rule refuses it, or its codemod does
        assert verdict is None or verdict.patched is None
        assert any(m in KIMI_REFUSED for m in mutations), [m.__name__ for m in mutations]
        return
    assert not any(m in KIMI_REFUSED for m in mutations), [m.__name__ for m in mutations]
    compile(verdict.patched, KIMI, "exec")
    assert_wrapper_delegates(verdict.patched)
    patched = kimi_verdict(version, verdict.patched)
    assert patched is not None and patched.state is State.PATCHED


def kimi_verdict(version: str, source: str) -> Verdict | None:
    """As ``apply`` judges Kimi-K2.5's file holding ``source``: the multimodal rule reads its class chain (None: it
    refuses the class), then the wrapper's codemod patches what the rule found."""
    release = reader(version).reading_through(lambda path: source if path == KIMI else reader(version).read(path))
    chains = ChainReader(release.read)
    chain = chains.registered(*release.registry["KimiK25ForConditionalGeneration"])
    found = find_wrapper(release, chains, chain, FAMILIES) if chain is not None else Refused("unreadable")
    if isinstance(found, Refused):
        return None
    return FoundWrappersPatch(KIMI, (found,)).examine(source, release, Options())


def reflow_whitelist(s: str) -> str:
    """One item per line <-> one line, whichever the list has."""
    match = re.search(r"(eagle3_target_supported|aux_hidden_states_supported) = \[([^\]]*)\]", s)
    need(match is not None)
    items = [i.strip() for i in match.group(2).split(",") if i.strip()]
    body = (
        ", ".join(items)
        if "\n" in match.group(2)
        else "\n" + "".join(f"            {i},\n" for i in items) + "        "
    )
    return s[: match.start(2)] + body + s[match.end(2) :]


def duplicate_whitelist(s: str) -> str:
    match = re.search(r"^( +)(eagle3_target_supported|aux_hidden_states_supported) = \[", s, re.M)
    need(match is not None)
    return s[: match.start()] + f'{match.group(1)}{match.group(2)} = ["llama"]\n' + s[match.start() :]


def whitelist_values(patched: str) -> list[str]:
    match = re.search(r"(?:eagle3_target_supported|aux_hidden_states_supported) = (\[[^\]]*\])", patched)
    return ast.literal_eval(match.group(1))


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(("0.11.0", "0.16.0", "0.17.1")),
    mutations=st.lists(
        st.sampled_from([crlf, tabs, reflow_whitelist, duplicate_whitelist]), min_size=1, max_size=3, unique=True
    ),
)
def test_mutated_gates_accept_the_new_types_or_are_refused(version, mutations):
    read = reader(version)
    original = read.read(GATE)
    source = original
    for mutate in sorted(mutations, key=lambda m: m is crlf):
        source = mutate(source)
    verdict = GATE_PATCH.examine(source, read, Options())
    if verdict.state is State.UNSUPPORTED:
        assert duplicate_whitelist in mutations and verdict.patched is None
        return
    assert duplicate_whitelist not in mutations
    compile(verdict.patched, GATE, "exec")
    accepted = whitelist_values(verdict.patched)
    assert set(whitelist_values(original)) <= set(accepted)
    for model_type in gated_model_types():
        assert any(entry in model_type for entry in accepted), model_type
