"""What the class chains read of a wrapper's ``forward``: the one attribute holding the language model whose call
every ``return`` gives, written directly or through local names (synthetic classes, no vLLM code here)."""

from __future__ import annotations

import ast
import textwrap
from typing import Optional

import pytest

from vllm_eagle3_patch.eagle3.class_chain import _forward_returns_from

pytestmark = pytest.mark.unit


def returns_from(forward_body: str) -> Optional[str]:
    source = "class Wrapper:\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward_body), " " * 8)
    (cls,) = ast.parse(source).body
    return _forward_returns_from(cls)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "attribute"),
    [
        ("return self.language_model(x)", "language_model"),
        ("return self.language_model.model(x)", "language_model"),
        ("h = self.language_model.model(x)\nreturn h", "language_model"),
        # a local name for the attribute, descending into a nested wrapper's own (an audio model's LM)
        (
            "language_model = self.language_model\n"
            "if hasattr(language_model, 'language_model'):\n"
            "    language_model = language_model.language_model\n"
            "h = language_model.model(x)\n"
            "return h",
            "language_model",
        ),
        ("lm = self.llm\nreturn lm(x)", "llm"),
        # not one attribute: the name is bound to two, or to something else as well
        ("lm = self.a\nif x:\n    lm = self.b\nreturn lm(x)", None),
        ("lm = self.a\nif x:\n    lm = make()\nreturn lm(x)", None),
        ("if x:\n    return self.a(x)\nreturn self.b(x)", None),
        ("h = self.language_model(x)\nreturn h + 1", None),
    ],
)
def test_the_attribute_every_return_gives_the_call_of(body: str, attribute: Optional[str]) -> None:
    assert returns_from(body) == attribute
