"""The EAGLE proposer's image-token codemod on small synthetic sources (no vLLM code here): the whole
patched text, written out, the shapes a ``load_model`` may copy the token in, the patched text run on
configs of every kind, and its target's verdicts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.as_codemod import as_codemod
from libcst.codemod import CodemodTest

from vllm_eagle3_patch.codemod.cst_tools import MARK
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3.release import PROPOSER_FILES, Release
from vllm_eagle3_patch.patches.eagle_proposer import (
    PATCH,
    READER,
    ImageTokenFromConfig,
    names_target,
)

GENERIC = (
    "            else:\n"
    "                self.model.config.image_token_index = (\n"
    "                    target.config.image_token_index\n"
    "                )\n"
)
GENERIC_PATCHED = (
    f"            else:\n                self.model.config.image_token_index = {READER}(target.config)  {MARK}\n"
)

CHAIN = (
    "        if target.multimodal:\n"
    '            if self.get_model_name(target) in ("PictureLM", "SketchLM"):\n'
    "                self.model.config.image_token_index = target.config.image_token_id\n"
    '            elif self.get_model_name(target) == "DoodleVL":\n'
    "                self.model.config.image_token_index = target.config.vision_config.image_token_id\n" + GENERIC
)

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


class TreeSketchProposer(SketchProposer):
    pass
"""

READER_TEXT = f'''\
def {READER}(config):  {MARK}
    """A multimodal target's image token id, from the first of these fields its config has
    (None where it has no image token: audio or video only)."""
    for path in (
        "image_token_index",
        "image_token_id",
        "vision_config.image_token_id",
        "media_placeholder_token_id",
        "img_context_token_id",
    ):
        *parents, field = path.split(".")
        holder = config
        for parent in parents:
            holder = getattr(holder, parent, None)
        if hasattr(holder, field):
            return getattr(holder, field)
    return None


'''


def patched_text(code: str, after_class: str = "class TreeSketchProposer") -> str:
    """``code`` with the generic copy read through the reader, and the reader before ``after_class``."""
    return code.replace(GENERIC, GENERIC_PATCHED).replace(after_class, READER_TEXT + after_class, 1)


pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


class TestImageTokenFromConfig(CodemodTest):
    TRANSFORM = as_codemod(ImageTokenFromConfig)

    def test_the_generic_copy_reads_through_the_reader_added_after_its_class(self) -> None:
        """The whole patched text: the named branches as they were, the generic read replaced."""
        after = f"""\
class SketchProposer:

    def __init__(self, drafter):
        self.drafter = drafter

    def get_model_name(self, target):
        return target.name

    def load_model(self, target):
        self.model = self.drafter
        if target.multimodal:
            if self.get_model_name(target) in ("PictureLM", "SketchLM"):
                self.model.config.image_token_index = target.config.image_token_id
            elif self.get_model_name(target) == "DoodleVL":
                self.model.config.image_token_index = target.config.vision_config.image_token_id
            else:
                self.model.config.image_token_index = {READER}(target.config)  {MARK}

    def propose(self, tokens):
        return tokens


{READER_TEXT}class TreeSketchProposer(SketchProposer):
    pass
"""
        self.assertCodemod(PROPOSER, after)

    def test_a_copy_without_a_chain_is_patched(self) -> None:
        """A ``load_model`` copying ``image_token_index`` for every multimodal target, no names asked."""
        bare = (
            "        if target.multimodal:\n"
            "            self.model.config.image_token_index = (\n"
            "                target.config.image_token_index)\n"
        )
        bare_patched = (
            "        if target.multimodal:\n"
            f"            self.model.config.image_token_index = {READER}(target.config)  {MARK}\n"
        )
        before = PROPOSER.replace(CHAIN, bare)
        self.assertCodemod(before, patched_text(PROPOSER.replace(CHAIN, bare_patched)))

    def test_the_copy_in_a_subclass_load_model_is_patched(self) -> None:
        """The copy may sit in a subclass's ``load_model``: the reader goes after that class."""
        subclassed = PROPOSER.replace(
            "        self.model = self.drafter\n" + CHAIN, "        self.model = self.drafter\n"
        )
        subclassed = subclassed.replace(
            "class TreeSketchProposer(SketchProposer):\n    pass\n",
            f"class TreeSketchProposer(SketchProposer):\n\n    def load_model(self, target):\n{CHAIN}",
        )
        subclassed += "\n\nclass Other:\n    pass\n"
        self.assertCodemod(subclassed, patched_text(subclassed, after_class="class Other"))

    def test_every_copy_is_patched_and_the_reader_added_once(self) -> None:
        """Two proposers copying the token (or a named branch reading ``image_token_index`` too): each read is
        replaced, since the reader gives the same value wherever the read worked."""
        named = CHAIN.replace("target.config.image_token_id", "target.config.image_token_index")
        before = PROPOSER.replace(CHAIN, named).replace(
            "class TreeSketchProposer(SketchProposer):\n    pass\n",
            f"class TreeSketchProposer(SketchProposer):\n\n    def load_model(self, target):\n{CHAIN}",
        )
        after = before.replace(GENERIC, GENERIC_PATCHED).replace(
            "self.model.config.image_token_index = target.config.image_token_index\n",
            f"self.model.config.image_token_index = {READER}(target.config)  {MARK}\n",
        )
        self.assertCodemod(before, after.replace("class TreeSketchProposer", READER_TEXT + "class TreeSketchProposer"))

    def test_the_drafter_and_the_target_keep_their_names(self) -> None:
        """The new line reuses the copy's own drafter and target config expressions."""

        def rename(code: str) -> str:
            return code.replace("self.model.config", "draft.cfg").replace("target.config", "vlm.config")

        self.assertCodemod(rename(PROPOSER), rename(patched_text(PROPOSER)))


def examine(code: str):
    return PATCH.examine(code, Release(Path("/nowhere"), lambda path: None), Options())


def test_only_the_new_line_and_the_reader_header_carry_the_mark():
    """The mark is how ``status`` tells a patched file: on the changed line and the added function's header."""
    marked = [line for line in examine(PROPOSER).patched.splitlines() if MARK in line]
    assert marked == [GENERIC_PATCHED.splitlines()[1], READER_TEXT.splitlines()[0]]


def test_patched_source_is_recognised_as_patched():
    """Fed back, the patched text is PATCHED, not patched twice."""
    verdict = examine(PROPOSER)
    assert verdict.state is State.UNPATCHED
    assert verdict.patched == patched_text(PROPOSER)
    again = examine(verdict.patched)
    assert again.state is State.PATCHED
    assert "vllm-eagle3-patch" in again.reason
    assert again.patched is None


def test_crlf_line_endings_are_kept():
    """A Windows-edited install keeps CRLF everywhere, the added lines and the set-aside bodies too."""
    patched = examine(PROPOSER.replace("\n", "\r\n")).patched
    assert patched == patched_text(PROPOSER).replace("\n", "\r\n")


def load_model(code: str, name: str, **config):
    """Run ``SketchProposer.load_model`` from ``code`` on a fake multimodal target; the drafter's token id."""
    namespace: dict = {}
    exec(compile(code, "<patched>", "exec"), namespace)  # noqa: S102 (running the patched text is the point)
    proposer = namespace["SketchProposer"](SimpleNamespace(config=SimpleNamespace()))
    proposer.load_model(SimpleNamespace(name=name, multimodal=True, config=SimpleNamespace(**config)))
    return proposer.model.config.image_token_index


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"image_token_id": 3}, 3),
        ({"vision_config": SimpleNamespace(image_token_id=4)}, 4),
        ({"media_placeholder_token_id": 7}, 7),
        ({"img_context_token_id": 8}, 8),
        ({"audio_token_index": 9}, None),
        ({"vision_config": SimpleNamespace(patch_size=14)}, None),
    ],
    ids=["image_token_id", "vision_config", "media-placeholder", "img-context", "audio-only", "vision-without-token"],
)
def test_a_config_without_image_token_index_loads_with_the_field_it_has(config, expected):
    """The point of the patch: unpatched, the generic branch raises; patched, the field the config has, or None."""
    with pytest.raises(AttributeError):
        load_model(PROPOSER, "OtherVL", **config)
    assert load_model(examine(PROPOSER).patched, "OtherVL", **config) == expected


def test_every_target_keeps_the_field_the_release_read_for_it():
    """Named branches read their field, and a config having ``image_token_index`` keeps it, whatever else it has."""
    patched = examine(PROPOSER).patched
    assert load_model(patched, "SketchLM", image_token_id=3, image_token_index=5) == 3
    assert load_model(patched, "DoodleVL", vision_config=SimpleNamespace(image_token_id=4), image_token_index=5) == 4
    every_field = {"image_token_index": 5, "image_token_id": 3, "media_placeholder_token_id": 7}
    assert load_model(patched, "OtherVL", **every_field) == load_model(PROPOSER, "OtherVL", **every_field) == 5
    assert load_model(patched, "OtherVL", image_token_index=None, image_token_id=3) is None


@pytest.mark.parametrize(
    "code",
    [
        PROPOSER.replace(CHAIN, "        share_image_token(self.model, target)\n"),
        PROPOSER.replace("target.config.image_token_index", "image_token_of(target)"),
        PROPOSER.replace("def load_model(self, target):", "def load(self, target):"),
    ],
    ids=["copy-moved", "not-a-read", "no-load-model"],
)
def test_a_proposer_reading_no_image_token_index_is_native(code):
    """No read of a target config's ``image_token_index`` in any ``load_model``: no config can lack it."""
    verdict = examine(code)
    assert verdict.state is State.NATIVE
    assert "reads no target config's image_token_index" in verdict.reason


def test_the_field_read_outside_load_model_does_not_count():
    """Only ``load_model`` is read: the same read elsewhere neither patches nor refuses."""
    code = PROPOSER.replace("return target.name", "return target.config.image_token_index")
    assert examine(code).patched == patched_text(code)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            PROPOSER.replace(GENERIC, GENERIC + "            log(target.config.image_token_index)\n"),
            "1 read(s) of <target>.config.image_token_index outside",
        ),
        (
            PROPOSER.replace(
                "                    target.config.image_token_index\n",
                "                    target.config.image_token_index + 1\n",
            ),
            "1 read(s) of <target>.config.image_token_index outside",
        ),
        (
            PROPOSER.replace(
                "                self.model.config.image_token_index = (\n",
                "                self.model.config.image_token_index = token = (\n",
            ),
            "1 read(s) of <target>.config.image_token_index outside",
        ),
        (
            PROPOSER + f"\n\ndef {READER}(config):\n    return 0\n",
            f"the name {READER} is taken",
        ),
        (
            PROPOSER.replace("def propose(self, tokens):", "def propose(self, tokens:"),
            "not valid Python",
        ),
    ],
    ids=["read-elsewhere", "not-a-plain-copy", "two-targets", "name-taken", "syntax-error"],
)
def test_unrecognised_sources_are_refused_with_the_reason(code, reason):
    """A shape the codemod does not know is refused, saying what it missed, and never written."""
    verdict = examine(code)
    assert verdict.state is State.UNSUPPORTED
    assert reason in verdict.reason
    assert verdict.patched is None


def test_located_where_a_proposer_copies_the_image_token(tmp_path):
    """The shared base's file where it copies the token, else the EAGLE proposer's; none where neither does."""
    base, eagle = PROPOSER_FILES
    (tmp_path / eagle).parent.mkdir(parents=True)
    (tmp_path / eagle).write_text(PROPOSER.replace(CHAIN, "        pass\n"))
    assert PATCH.locate(Release(tmp_path)) is None
    (tmp_path / eagle).write_text(PROPOSER)
    assert PATCH.locate(Release(tmp_path)) == eagle
    (tmp_path / base).write_text(PROPOSER)
    (tmp_path / eagle).write_text("class EagleProposer(SketchProposer):\n    pass\n")
    assert PATCH.locate(Release(tmp_path)) == base


def test_a_proposer_names_a_target_only_as_a_string():
    """What ``status --check --model`` asks: does the proposer's own branch serve this class?"""
    assert names_target(PROPOSER, "DoodleVL")
    assert not names_target(PROPOSER, "KimiK25ForConditionalGeneration")
    assert not names_target(PROPOSER.replace('"DoodleVL"', "DOODLE"), "DoodleVL")
