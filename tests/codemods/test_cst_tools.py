"""The LibCST helpers the codemods share, on small synthetic modules."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst._nodes.internal import CodegenState

from vllm_eagle3_patch.codemod.cst_tools import MARK, add_import, find, parse, replace_node, walk, written
from vllm_eagle3_patch.codemod.patch import Unrecognised

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

PACKAGE = "vllm.model_executor.models"
INTERFACES = f"{PACKAGE}.interfaces"


def with_import(code: str, module: str = INTERFACES, name: str = "SupportsEagle3") -> str:
    return add_import(cst.parse_module(code), module, name, PACKAGE).code


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "from .interfaces import SupportsPP\n",
            f"from .interfaces import SupportsPP, SupportsEagle3  {MARK}\n",
        ),
        (
            "from vllm.model_executor.models.interfaces import SupportsPP\n",
            f"from vllm.model_executor.models.interfaces import SupportsPP, SupportsEagle3  {MARK}\n",
        ),
        (
            "from .interfaces import (\n    SupportsLoRA,\n    SupportsPP,\n)\n",
            f"from .interfaces import (\n    SupportsLoRA,\n    SupportsPP,\n    SupportsEagle3,\n)  {MARK}\n",
        ),
        (
            "from .interfaces import (SupportsLoRA,\n                         SupportsPP)\n",
            f"from .interfaces import (SupportsLoRA,\n                         SupportsPP,\n                         SupportsEagle3)  {MARK}\n",
        ),
        (
            '"""Doc."""\nimport torch\nfrom .utils import x\n\nCONSTANT = 1\n\nclass A: pass\n',
            f'"""Doc."""\nimport torch\nfrom .utils import x\nfrom {INTERFACES} import SupportsEagle3  {MARK}\n\nCONSTANT = 1\n\nclass A: pass\n',
        ),
        (
            '"""Doc."""\n\nclass A: pass\n',
            f'"""Doc."""\nfrom {INTERFACES} import SupportsEagle3  {MARK}\n\nclass A: pass\n',
        ),
    ],
    ids=["relative", "absolute", "one-per-line", "hanging", "new-line", "no-imports"],
)
def test_add_import_extends_or_adds_the_import(before, after):
    assert with_import(before) == after


@pytest.mark.parametrize(
    "code",
    [
        "from .interfaces import SupportsEagle3, SupportsPP\n",
        "from .interfaces import *\n",
    ],
)
def test_add_import_leaves_a_name_already_imported(code):
    assert with_import(code) == code


def test_add_import_resolves_relative_imports_against_the_package():
    # ..interfaces from vllm.model_executor.models is vllm.model_executor.interfaces: another module.
    out = with_import("from ..interfaces import SupportsPP\nfrom .other import X\n")
    assert out.endswith(f"from {INTERFACES} import SupportsEagle3  {MARK}\n")
    assert "from ..interfaces import SupportsPP\n" in out


def test_walk_is_in_source_order_and_can_stay_out_of_expressions():
    module = cst.parse_module("a = b + c\nif d:\n    e = f\n")
    names = [n.value for n in walk(module) if isinstance(n, cst.Name)]
    assert names == ["a", "b", "c", "d", "e", "f"]
    shallow = [n for n in walk(module, lambda n: not isinstance(n, cst.BaseExpression)) if isinstance(n, cst.Name)]
    assert [n.value for n in shallow] == ["a", "d", "e", "f"]  # b + c is met but not entered


def test_replace_node_rebuilds_only_the_path_to_the_node():
    module = cst.parse_module("def f():\n    if x:\n        return 1\n\ndef g():\n    return 2\n")
    (one,) = find(module, cst.Integer, lambda i: i.value == "1")
    replaced = replace_node(module, one, cst.Integer("3"))
    assert replaced.code == "def f():\n    if x:\n        return 3\n\ndef g():\n    return 2\n"
    assert replaced.body[1] is module.body[1]  # g untouched, not copied
    with pytest.raises(ValueError):
        replace_node(module.body[1], one, cst.Integer("3"))


VARIED = """\
\"\"\"Doc.\"\"\"
from .interfaces import (SupportsPP,
    SupportsLoRA)  # keep


@decorator(1)
class A(Base, metaclass=Meta):
    x: int = (1 + 2) * 3

    async def f(self, *a, b=lambda: [i for i in range(3) if i], **k) -> "A":
        async with c as d, e:
            yield {**k, "a": a[1:2, ...]}, not b, (yield)
        return f"{self!r:>10}"

    def g(self):
        try:
            pass
        except* ValueError as error:
            raise
        match self:
            case [1, *rest] | {"k": _} if rest:
                del rest
        global q
        x = y if z else w; x += 1
"""


def test_a_tree_parsed_without_checking_each_node_is_the_same_tree():
    """``parse`` skips the nodes' own validation while LibCST's parser builds them: the tree must not change."""
    trusted = parse(VARIED)
    assert trusted.deep_equals(cst.parse_module(VARIED))
    assert trusted.code == VARIED


@pytest.mark.parametrize("source", ["x = 1\n", "def broken(:\n"])
def test_nodes_a_codemod_builds_are_checked_again_after_a_parse(source):
    """The check comes back after the parse, whether it succeeded or raised."""
    try:
        parse(source)
    except Unrecognised:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_a_module_is_written_as_libcst_writes_it_and_libcst_keeps_its_position_hook():
    source = 'import torch\n\n\n@dec(\n    1,\n)\nclass A(B):  # note\n    def f(self, x: "int" = 1) -> int:\n        return [x for x in range(3)][0]\n'
    module = cst.parse_module(source)
    hook = vars(CodegenState)["record_syntactic_position"]
    assert written(module) == module.code == source
    assert vars(CodegenState)["record_syntactic_position"] is hook
    assert cst.MetadataWrapper(module).resolve(cst.metadata.PositionProvider)  # positions are still recorded
