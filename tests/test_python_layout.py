"""A file's layout (``python_layout.py``): where its functions and classes lie, found once and shared.

Synthetic sources only; the real model files go through it in ``test_outline.py`` (every outline restores its
file byte for byte) and in the release tests.
"""

from __future__ import annotations

import pytest

from vllm_eagle3_patch.codemod.outline import outline
from vllm_eagle3_patch.eagle3.python_layout import (
    ClassSpan,
    FunctionSpan,
    Layouts,
    StatementSpan,
    class_tree,
    layout_of,
    python_tree,
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
    assert [(m.cls, m.name, m.first, m.line, m.last) for m in model.methods] == [
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
