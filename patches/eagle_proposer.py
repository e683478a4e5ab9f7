"""``v1/spec_decode/eagle.py`` (0.15.0-0.17.1): the drafter finds Kimi-K2.5's media token.

For a multimodal target the proposer copies the target's image token id into the
drafter's ``config.image_token_index``.  Kimi-K2.5's config calls it
``media_placeholder_token_id`` and has no ``image_token_index``: loading the drafter fails
with an AttributeError.  A branch for Kimi-K2.5 goes in before the generic ``else``, as
upstream did in 0.18.0; every other target takes the branch it took before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodCommand, CodemodContext

from vllm_eagle3_patch.codemod import judge
from vllm_eagle3_patch.cst_tools import mark, only, replace_child, statements
from vllm_eagle3_patch.target import Options, ReadFile, SingleFileTarget, Verdict

PATH = "v1/spec_decode/eagle.py"
KIMI_K25_MODEL = "model_executor/models/kimi_k25.py"
WRAPPER = "KimiK25ForConditionalGeneration"
LOAD_MODEL = "load_model"

_copies_image_token_index = m.Assign(
    targets=[m.AssignTarget(m.Attribute(attr=m.Name("image_token_index")))],
    value=m.Attribute(value=m.Attribute(attr=m.Name("config")), attr=m.Name("image_token_index")),
)
_generic_branch = m.If(
    orelse=m.Else(body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[_copies_image_token_index])]))
)


class KimiK25MediaToken(CodemodCommand):
    """``elif <name of target> == "KimiK25ForConditionalGeneration": ... media_placeholder_token_id``."""

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        what = f"in {LOAD_MODEL}, an if/elif chain ending in `else: ...image_token_index = target.config.image_token_index`"
        cls, load_model, branch = only(_generic_branches(tree), what)  # type: ignore[misc]
        generic: cst.Else = branch.orelse  # type: ignore[assignment]
        assignment: cst.Assign = generic.body.body[0].body[0]  # type: ignore[attr-defined]
        code = cst.Module([]).code_for_node
        (kimi,) = statements(
            f'if {code(_compared_name(branch))} == "{WRAPPER}":\n'
            f"    {code(assignment.targets[0].target)} = {code(assignment.value.value)}.media_placeholder_token_id\n",  # type: ignore[attr-defined]
            tree,
        )
        elif_kimi = mark(kimi).with_changes(orelse=generic)  # type: ignore[attr-defined]
        new_load_model = load_model.deep_replace(branch, branch.with_changes(orelse=elif_kimi))
        return replace_child(tree, cls, replace_child(cls, load_model, new_load_model))


def _generic_branches(tree: cst.Module) -> list[tuple[cst.ClassDef, cst.FunctionDef, cst.If]]:
    """Every generic image-token branch in a proposer's ``load_model``, with its class and method."""
    found = []
    for cls in (s for s in tree.body if isinstance(s, cst.ClassDef)):
        for load_model in (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == LOAD_MODEL):
            found.extend((cls, load_model, branch) for branch in m.findall(load_model, _generic_branch))
    return found  # type: ignore[return-value]


def _compared_name(branch: cst.If) -> cst.BaseExpression:
    """The expression the chain compares with model names (``self.get_model_name(target_model)``)."""
    comparison = branch.test
    if m.matches(comparison, m.Comparison(comparisons=[m.ComparisonTarget(operator=m.Equal() | m.In())])):
        return comparison.left  # type: ignore[attr-defined]
    return only([], "a comparison of the target's model name in the elif before the generic else")  # type: ignore[return-value]


def _native(module: cst.Module) -> Optional[str]:
    load_models = [
        s for c in module.body if isinstance(c, cst.ClassDef) for s in c.body.body
        if isinstance(s, cst.FunctionDef) and s.name.value == LOAD_MODEL
    ]  # fmt: skip
    if any(m.findall(f, m.SimpleString(f'"{WRAPPER}"') | m.SimpleString(f"'{WRAPPER}'")) for f in load_models):
        return "the proposer already knows Kimi-K2.5's media token (upstream support)"
    if not any(m.findall(f, _copies_image_token_index) for f in load_models):
        return "the proposer does not copy image_token_index here (moved upstream)"
    return None


class EagleProposerTarget(SingleFileTarget):
    name = "EAGLE proposer"
    path = PATH

    def locate(self, package_dir: Path) -> Optional[str]:
        """A target only where vLLM has Kimi-K2.5 at all."""
        if (package_dir / KIMI_K25_MODEL).is_file() and (package_dir / PATH).is_file():
            return PATH
        return None

    def examine(self, source: str, read: ReadFile, options: Options) -> Verdict:
        return judge(source, lambda: KimiK25MediaToken(CodemodContext()), native=_native)


TARGET = EagleProposerTarget()
