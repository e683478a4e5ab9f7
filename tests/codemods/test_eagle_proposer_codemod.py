"""The EAGLE proposer's Kimi-K2.5 media-token codemod on small synthetic sources (no vLLM code here):
the whole patched text, written out, the subclass case, and its target's verdicts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.as_codemod import as_codemod
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.codemod.cst_tools import MARK
from vllm_eagle3_patch.codemod.target import Options, State
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patches.eagle_proposer import (
    KIMI_K25_MODEL,
    PATH,
    TARGET,
    KimiK25MediaToken,
)

GENERIC = "            else:\n                self.model.config.image_token_index = target.config.image_token_index\n"

ELIF = (
    '            elif self.get_model_name(target) in ("ScribbleVL", "DoodleVL"):\n'
    "                self.model.config.image_token_index = target.config.vision_config.image_token_id\n"
)

CHAIN = (
    "        if target.multimodal:\n"
    '            if self.get_model_name(target) == "PictureLM":\n'
    "                self.model.config.image_token_index = target.config.image_token_id\n" + ELIF + GENERIC
)

KIMI = (
    '            elif self.get_model_name(target) == "KimiK25ForConditionalGeneration":  # vllm-eagle3-patch\n'
    "                self.model.config.image_token_index = target.config.media_placeholder_token_id\n"
)

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

PROPOSER = f"""\
class SketchProposer:

    def __init__(self, drafter):
        self.drafter = drafter

    def get_model_name(self, target):
        return target.name

    def load_model(self, target):
        self.model = self.drafter
{CHAIN}
    def propose(self, tokens):
        return tokens
"""

SUBCLASSED = f"""\
class BaseSketchProposer:

    def load_model(self, target):
        self.model = self.drafter


class TreeSketchProposer(BaseSketchProposer):

    def load_model(self, target):
        super().load_model(target)
{CHAIN}"""


class TestKimiK25MediaToken(CodemodTest):
    TRANSFORM = as_codemod(KimiK25MediaToken)

    def test_typical_chain_gets_a_kimi_branch_before_the_generic_else(self) -> None:
        """The whole patched text: one marked elif, every other branch and method unchanged."""
        after = """\
class SketchProposer:

    def __init__(self, drafter):
        self.drafter = drafter

    def get_model_name(self, target):
        return target.name

    def load_model(self, target):
        self.model = self.drafter
        if target.multimodal:
            if self.get_model_name(target) == "PictureLM":
                self.model.config.image_token_index = target.config.image_token_id
            elif self.get_model_name(target) in ("ScribbleVL", "DoodleVL"):
                self.model.config.image_token_index = target.config.vision_config.image_token_id
            elif self.get_model_name(target) == "KimiK25ForConditionalGeneration":  # vllm-eagle3-patch
                self.model.config.image_token_index = target.config.media_placeholder_token_id
            else:
                self.model.config.image_token_index = target.config.image_token_index

    def propose(self, tokens):
        return tokens
"""
        self.assertCodemod(PROPOSER, after)

    def test_a_lone_if_else_becomes_an_elif_chain(self) -> None:
        """With one named branch only, the Kimi branch still goes between it and the ``else``."""
        before = PROPOSER.replace(ELIF, "")
        self.assertCodemod(before, before.replace(GENERIC, KIMI + GENERIC))

    def test_the_chain_in_a_subclass_load_model_is_patched(self) -> None:
        """The chain may sit in a subclass's ``load_model``; the base class's one is left alone."""
        self.assertCodemod(SUBCLASSED, SUBCLASSED.replace(GENERIC, KIMI + GENERIC))

    def test_the_drafter_and_the_target_keep_their_names(self) -> None:
        """The new branch reuses the chain's own compared expression, drafter and target config."""

        def rename(code: str) -> str:
            code = code.replace("self.get_model_name(target)", "arch").replace("self.model.config", "draft.cfg")
            return code.replace("target.config", "vlm.config")

        self.assertCodemod(rename(PROPOSER), rename(PROPOSER.replace(GENERIC, KIMI + GENERIC)))


def examine(code: str):
    return TARGET.examine(code, Release(Path("/nowhere"), lambda path: None), Options())


def test_only_the_new_elif_carries_the_mark():
    """The mark is how ``status`` tells a patched file; it must be on the added line and nowhere else."""
    marked = [line for line in examine(PROPOSER).patched.splitlines() if MARK in line]
    assert marked == [KIMI.splitlines()[0]]


def test_patched_source_is_recognised_as_patched():
    """Fed back, the patched text is PATCHED, not patched twice."""
    verdict = examine(PROPOSER)
    assert verdict.state is State.UNPATCHED
    again = examine(verdict.patched)
    assert again.state is State.PATCHED
    assert "vllm-eagle3-patch" in again.reason
    assert again.patched is None


def test_crlf_line_endings_are_kept():
    """A Windows-edited install keeps CRLF everywhere, the added lines and the set-aside bodies too."""
    patched = examine(PROPOSER.replace("\n", "\r\n")).patched
    assert patched == PROPOSER.replace(GENERIC, KIMI + GENERIC).replace("\n", "\r\n")


def load_model(code: str, name: str, **config):
    """Run ``SketchProposer.load_model`` from ``code`` on a fake multimodal target; the drafter's token id."""
    namespace: dict = {}
    exec(compile(code, "<patched>", "exec"), namespace)  # noqa: S102 (running the patched text is the point)
    proposer = namespace["SketchProposer"](SimpleNamespace(config=SimpleNamespace()))
    proposer.load_model(SimpleNamespace(name=name, multimodal=True, config=SimpleNamespace(**config)))
    return proposer.model.config.image_token_index


def test_patched_text_compiles_and_finds_kimi_k25_media_token():
    """The point of the patch: Kimi-K2.5 (no image_token_index) loads; the unpatched text fails."""
    with pytest.raises(AttributeError):
        load_model(PROPOSER, "KimiK25ForConditionalGeneration", media_placeholder_token_id=7)
    patched = examine(PROPOSER).patched
    assert load_model(patched, "KimiK25ForConditionalGeneration", media_placeholder_token_id=7) == 7


def test_other_targets_take_the_branch_they_took_before():
    """Every other target still reaches its own branch or the generic ``else``."""
    patched = examine(PROPOSER).patched
    assert load_model(patched, "PictureLM", image_token_id=3) == 3
    assert load_model(patched, "OtherVL", image_token_index=5, media_placeholder_token_id=7) == 5


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            PROPOSER.replace('"DoodleVL"', '"KimiK25ForConditionalGeneration"'),
            "already knows Kimi-K2.5",
        ),
        (
            PROPOSER.replace(CHAIN, "        share_image_token(self.model, target)\n"),
            "does not copy image_token_index",
        ),
        (
            PROPOSER.replace("target.config.image_token_index", "image_token_of(target)"),
            "does not copy",
        ),
    ],
    ids=["kimi-branch", "copy-moved", "not-a-copy"],
)
def test_native_proposers_are_left_alone(code, reason):
    """Upstream's own Kimi-K2.5 branch, or no image-token copy at all: nothing to patch."""
    verdict = examine(code)
    assert verdict.state is State.NATIVE
    assert reason in verdict.reason


def test_kimi_named_outside_load_model_is_not_native():
    """Only ``load_model`` counts: a mention of the wrapper elsewhere is not upstream support."""
    code = PROPOSER.replace("return target.name", 'return target.name or "KimiK25ForConditionalGeneration"')
    assert examine(code).state is State.UNPATCHED


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            PROPOSER.replace(GENERIC, GENERIC + "                log(target)\n"),
            "found none",
        ),
        (
            PROPOSER + "\n\n" + PROPOSER.replace("class SketchProposer", "class OtherProposer"),
            "found 2",
        ),
        (
            PROPOSER.replace('in ("ScribbleVL", "DoodleVL")', '!= "PictureLM"'),
            "a comparison of the target's model",
        ),
        (
            PROPOSER.replace("def propose(self, tokens):", "def propose(self, tokens:"),
            "not valid Python",
        ),
        (
            PROPOSER.replace(
                'self.get_model_name(target) in ("ScribbleVL", "DoodleVL")', '"Vision" in self.get_model_name(target)'
            ),
            "a comparison of the target's model",
        ),
    ],
    ids=["else-does-more", "two-chains", "not-equal", "syntax-error", "substring-test"],
)
def test_unrecognised_sources_are_refused_with_the_reason(code, reason):
    """A shape the codemod does not know is refused, saying what it missed, and never written."""
    verdict = examine(code)
    assert verdict.state is State.UNSUPPORTED
    assert reason in verdict.reason
    assert verdict.patched is None


def test_located_only_where_the_release_has_kimi_k25(tmp_path):
    """Without Kimi-K2.5's model file the proposer is not this tool's business."""
    (tmp_path / PATH).parent.mkdir(parents=True)
    (tmp_path / PATH).write_text(PROPOSER)
    assert TARGET.locate(Release(tmp_path)) is None
    (tmp_path / KIMI_K25_MODEL).parent.mkdir(parents=True)
    (tmp_path / KIMI_K25_MODEL).write_text("")
    assert TARGET.locate(Release(tmp_path)) == PATH
