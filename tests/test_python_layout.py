"""A file's layout (``python_layout.py``): where its functions and classes lie, found once and shared.

Synthetic sources only; the real model files go through it in ``test_outline.py`` (every outline restores its
file byte for byte) and in the release tests.
"""

from __future__ import annotations

import pytest

from vllm_eagle3_patch.codemod.outline import outline
from vllm_eagle3_patch.eagle3.class_chain import read_model_file
from vllm_eagle3_patch.eagle3.python_layout import (
    ClassSpan,
    FunctionSpan,
    Layouts,
    MisSplit,
    StatementSpan,
    class_body,
    class_tree,
    layout_of,
    python_tree,
    source_lines,
    split_module,
)
from vllm_eagle3_patch.patches.decoder_loop import layers_ignoring_the_residual

pytestmark = pytest.mark.unit

SOURCE = '''import torch


@decorated(
    1,
)
def helper(x): return x


class Layer(nn.Module):
    """A layer that overwrites its residual before reading it."""

    def forward(self, positions, hidden_states, residual):
        residual = hidden_states
        return hidden_states, residual


class Model(nn.Module):
    def __init__(self):
        self.layers = make_layers(lambda prefix: Layer(prefix))

    @torch.no_grad()
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
'''


def test_the_layout_says_where_each_function_class_and_method_lies():
    layout = layout_of(python_tree(SOURCE))
    imported, helper, layer, model = layout
    assert imported == StatementSpan(1, 0, 1, "import")
    assert helper == FunctionSpan(None, "helper", 7, 0, 7, ((4, 1),), (7, 15)) and helper.first == 4
    assert isinstance(layer, ClassSpan) and (layer.name, layer.first, layer.last) == ("Layer", 10, 15)
    methods = [m for m in model.body if isinstance(m, FunctionSpan)]
    assert [(m.cls, m.name, m.first, m.line, m.last) for m in methods] == [
        ("Model", "__init__", 19, 19, 20),
        ("Model", "forward", 22, 23, 26),
    ]


def test_a_class_is_parsed_alone_from_its_lines():
    layout = Layouts().of(SOURCE)
    assert layout is not None
    model = class_tree(SOURCE.splitlines(keepends=True), layout[3])  # type: ignore[arg-type]
    assert model.name == "Model" and [f.name for f in model.body] == ["__init__", "forward"]  # type: ignore[attr-defined]


def test_a_layout_found_once_is_shared_and_an_unparsable_source_has_none():
    layouts = Layouts()
    assert layouts.of("def broken(:\n") is None
    first = layouts.of(SOURCE)
    assert layouts.of(SOURCE) is first  # kept, not found again
    layouts.remember("x = 1\n", ())
    assert layouts.of("x = 1\n") == ()


def test_the_outline_from_a_layout_known_already_is_the_outline_from_the_source():
    keep = lambda function: function.name == "forward" and function.cls == "Model"
    known = Layouts()
    known.remember(SOURCE, layout_of(python_tree(SOURCE)))
    given = outline(SOURCE, keep, layouts=known)
    found = outline(SOURCE, keep)
    assert given.text.replace(given.nonce, "") == found.text.replace(found.nonce, "") and given.bodies == found.bodies
    assert "residual = hidden_states" not in given.text and given.restore(given.text) == SOURCE


@pytest.mark.parametrize(
    ("first_statement", "ignored"),
    [("residual = hidden_states", True), ("hidden_states = hidden_states + residual", False)],
)
def test_layers_that_overwrite_the_residual_first_are_read_class_by_class(first_statement, ignored):
    source = SOURCE.replace("        residual = hidden_states\n", f"        {first_statement}\n")
    assert layers_ignoring_the_residual(source, "Model", Layouts()) is ignored


def test_every_other_statement_has_its_kind():
    """The outline keeps docstrings and compound statements (a ``match`` too) and may set the rest aside."""
    source = '"""Doc."""\nimport a\nx = 1\nif x:\n    pass\nmatch x:\n    case 1:\n        pass\n"""Not a doc."""\n'
    kinds = [span.kind for span in layout_of(python_tree(source))]
    assert kinds == ["docstring", "import", "other", "compound", "compound", "other"]


TRICKY = '''"""A module docstring whose lines start in column 0:
class NotAClass(Base):
    pass
"""
import os; import sys
from x import (
    a,
)

if os.name:
    A = 1
else:
    A = 2


@first
@second(
    1,
)
class Decorated(Base):
    text = """
    not = "a statement"
    """

    def f(self):  # a comment
        return '#' + "'"

    # the class's last comment


def g():
    return """x"""
'''


def test_a_file_is_split_at_its_classes_and_lays_out_as_when_parsed_whole():
    split = split_module(TRICKY)
    assert split is not None
    lines = source_lines(TRICKY)
    decorated = next(span for span in split.layout if isinstance(span, ClassSpan))
    assert (decorated.name, decorated.first, decorated.last, decorated.body) == ("Decorated", 16, 26, None)
    filled = tuple(
        span._replace(body=class_body(class_tree(lines, span))) if isinstance(span, ClassSpan) else span
        for span in split.layout
    )
    assert filled == layout_of(python_tree(TRICKY))
    assert [type(node).__name__ for node in split.rest.body] == [
        "Expr",
        "Import",
        "Import",
        "ImportFrom",
        "If",
        "FunctionDef",
    ]


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def f(self):\n        return f(\n1)\nx = 2\n",  # a line in column 0 within brackets
        "class A:\n    pass\r\nx = 1\rclass B: pass\n",  # a lone \r, which the layout's lines do not number
        "def broken(:\n",
    ],
)
def test_a_split_that_is_not_sure_gives_way_to_a_whole_parse(source):
    assert split_module(source) is None
    whole = Layouts().of(source)
    try:
        assert whole == layout_of(python_tree(source))
    except SyntaxError:
        assert whole is None


MISPLACED = 'class A:\n    x = """\n# the end of a string, not a comment"""\n\n\ndef f():\n    return 1\n'
"""The split takes the string's last line for a comment after the class: the class is not where it says."""


def test_a_class_that_is_not_where_the_split_put_it_is_read_from_the_whole_file():
    split = split_module(MISPLACED)
    assert split is not None and split.layout[0] == ClassSpan("A", 1, 2, None)
    with pytest.raises(MisSplit):
        class_tree(source_lines(MISPLACED), split.layout[0])  # type: ignore[arg-type]
    keep_all = lambda function: True
    parsed = outline(MISPLACED, keep_all, keep_class=lambda name: True)
    assert parsed.restore(parsed.text) == MISPLACED
    module = read_model_file("models.m", MISPLACED, False, ("A",))
    assert module is not None and module.layout == layout_of(python_tree(MISPLACED))
    assert set(module.classes) == {"A"}


def test_the_residual_check_reads_a_layer_the_split_misplaced_from_the_whole_file():
    source = (
        "class Layer(nn.Module):\n"
        "    def forward(self, positions, hidden_states, residual):\n"
        "        residual = hidden_states\n"
        "        return hidden_states, residual\n"
        "\n"
        '    note = """\n'
        '# the end of a string, not a comment"""\n'
        "\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.layers = make_layers(lambda prefix: Layer(prefix))\n"
    )
    split = split_module(source)
    assert split is not None and split.layout[0] == ClassSpan("Layer", 1, 6, None)  # the string's last line left out
    assert layers_ignoring_the_residual(source, "Model", Layouts()) is True
    assert layers_ignoring_the_residual(source.replace("residual = hidden_states", "pass"), "Model", Layouts()) is False


def test_the_classes_a_class_names_are_found_in_its_text():
    source = SOURCE + "\n\nclass CausalLM(nn.Module):\n    def __init__(self):\n        self.model = Model()\n"
    assert Layouts().classes_named_in(source, ("CausalLM",)) == {"Model", "CausalLM"}
    assert Layouts().classes_named_in(source, ("Model",)) == {"Model", "Layer"}
    assert Layouts().classes_named_in(source, ("Absent",)) == frozenset()
    assert Layouts().classes_named_in("class (", ("A",)) is None  # no layout: not known for sure
    misplaced = MISPLACED.replace("def f():", "class B(A):\n    pass\n\n\ndef f():")
    assert Layouts().classes_named_in(misplaced, ("A",)) is None  # A is not where the split put it
