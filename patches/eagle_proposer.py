"""``v1/spec_decode/eagle.py`` (0.15.0-0.17.1): the drafter finds Kimi-K2.5's media token.

For a multimodal target the proposer copies the target's image token id into the
drafter's ``config.image_token_index``.  Kimi-K2.5's config calls it
``media_placeholder_token_id`` and has no ``image_token_index``: loading the drafter fails
with an AttributeError.  A branch for Kimi-K2.5 goes in before the generic ``else``, as
upstream did in 0.18.0; every other target takes the branch it took before.
"""

from __future__ import annotations

from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    assigned,
    cst,
    find,
    find_statements,
    is_attribute,
    is_string,
    mark,
    only,
    replace_child,
    replace_node,
    sole,
    sole_statement,
    statements,
)
from vllm_eagle3_patch.codemod.judge import judge
from vllm_eagle3_patch.codemod.target import Options, SingleFileTarget, Verdict
from vllm_eagle3_patch.eagle3.release import MODELS, PROPOSER, Release

PATH = PROPOSER
KIMI_K25_MODEL = f"{MODELS}/kimi_k25.py"
WRAPPER = "KimiK25ForConditionalGeneration"
LOAD_MODEL = "load_model"


def _copies_image_token_index(line: cst.CSTNode) -> bool:
    """``<x>.image_token_index = <y>.config.image_token_index``, alone on its line."""
    statement = sole_statement(line)
    source = statement.value if isinstance(statement, cst.Assign) else None
    return (
        is_attribute(assigned(statement), "image_token_index")
        and is_attribute(source, "image_token_index")
        and is_attribute(source.value, "config")  # type: ignore[union-attr]
    )


def _is_generic_branch(branch: cst.If) -> bool:
    """An ``if``/``elif`` whose ``else:`` holds only the image-token copy."""
    generic = branch.orelse
    return (
        isinstance(generic, cst.Else)
        and isinstance(generic.body, cst.IndentedBlock)
        and _copies_image_token_index(sole(generic.body.body))
    )


class KimiK25MediaToken:
    """``elif <name of target> == "KimiK25ForConditionalGeneration": ... media_placeholder_token_id``."""

    def transform_module(self, tree: cst.Module) -> cst.Module:
        what = (
            f"in {LOAD_MODEL}, an if/elif chain ending in "
            "`else: ...image_token_index = target.config.image_token_index`"
        )
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
        new_load_model = replace_node(load_model, branch, branch.with_changes(orelse=elif_kimi))
        return replace_child(tree, cls, replace_child(cls, load_model, new_load_model))


def _generic_branches(tree: cst.Module) -> list[tuple[cst.ClassDef, cst.FunctionDef, cst.If]]:
    """Every generic image-token branch in a proposer's ``load_model``, with its class and method."""
    return [
        (cls, load_model, branch)
        for cls, load_model in _load_models(tree)
        for branch in find_statements(load_model, cst.If, _is_generic_branch)
    ]


def _load_models(tree: cst.Module) -> list[tuple[cst.ClassDef, cst.FunctionDef]]:
    """Every class's ``load_model`` method (the proposer and its subclasses)."""
    return [
        (cls, statement)
        for cls in tree.body
        if isinstance(cls, cst.ClassDef)
        for statement in cls.body.body
        if isinstance(statement, cst.FunctionDef) and statement.name.value == LOAD_MODEL
    ]


def _compared_name(branch: cst.If) -> cst.BaseExpression:
    """The expression the chain compares with model names (``self.get_model_name(target_model)``)."""
    comparison = branch.test
    if (
        isinstance(comparison, cst.Comparison)
        and len(comparison.comparisons) == 1
        and isinstance(comparison.comparisons[0].operator, (cst.Equal, cst.In))
        and not isinstance(comparison.left, (cst.SimpleString, cst.ConcatenatedString))
    ):
        return comparison.left  # `"Beta" in name` tests a substring: no name to compare with Kimi-K2.5's
    return only([], "a comparison of the target's model name in the elif before the generic else")  # type: ignore[return-value]


def _native(module: cst.Module) -> Optional[str]:
    load_models = [load_model for _, load_model in _load_models(module)]
    if any(find(f, cst.SimpleString, lambda s: is_string(s, WRAPPER)) for f in load_models):
        return "the proposer already knows Kimi-K2.5's media token (upstream support)"
    if not any(find_statements(f, cst.SimpleStatementLine, _copies_image_token_index) for f in load_models):
        return "the proposer does not copy image_token_index here (moved upstream)"
    return None


class EagleProposerTarget(SingleFileTarget):
    name = "EAGLE proposer"
    path = PATH

    def locate(self, release: Release) -> Optional[str]:
        """A target only where vLLM has Kimi-K2.5 at all."""
        return PATH if release.exists(KIMI_K25_MODEL) and release.exists(PATH) else None

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        return judge(source, KimiK25MediaToken, native=_native, reads=lambda function: function.name == LOAD_MODEL)


TARGET = EagleProposerTarget()
