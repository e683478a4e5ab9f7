"""Setting function bodies aside before LibCST parses a file must change nothing in the result."""

from __future__ import annotations

import libcst as cst
import pytest
from helpers.selection import release_param
from helpers.wheel_corpus import ALL_RELEASES, release_tree

from vllm_eagle3_patch.catalog import FAMILIES, every_patch
from vllm_eagle3_patch.codemod import judge
from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.outline import Outline, outline
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.discovery import discover
from vllm_eagle3_patch.eagle3.python_layout import Layouts
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.patch_kinds import Found
from vllm_eagle3_patch.patches.decoder_eagle3 import FileReading

SAMPLE = '''\
"""A module."""
import functools


def helper(x):
    """Doc."""
    return x + 1


def one_liner(): return 1


def two_line_header(
        a, b): return a


@functools.cache
async def decorated(a,
                    b):
    # a comment first
    await a
    return b
    # a trailing comment at body indentation

class Model:
    attribute = 1

    def __init__(self):
        self.x = """multi
line"""

    def forward(self, x):
        return x; x += 1

    class Inner:
        def method(self):
            return 2
'''

NOTHING_KEPT = lambda function: False


def round_trip(source: str, keep=NOTHING_KEPT) -> tuple[Outline, str]:
    parsed = outline(source, keep)
    return parsed, parsed.restore(cst.parse_module(parsed.text).code)


@pytest.mark.unit
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_bodies_set_aside_come_back_byte_for_byte(newline, final_newline):
    source = SAMPLE if final_newline else SAMPLE.rstrip("\n")
    source = source.replace("\n", newline)
    parsed, restored = round_trip(source)
    assert restored == source
    assert len(parsed.bodies) == 4  # helper, decorated, __init__, forward; one-liners and Inner's method stay
    assert "return x + 1" not in parsed.text and "await a" not in parsed.text
    assert "# a comment first" in parsed.text  # before the first statement: not part of the span
    assert "def one_liner(): return 1" in parsed.text and "return 2" in parsed.text


@pytest.mark.unit
def test_keep_sees_class_name_and_source_and_keeps_what_it_accepts():
    seen = []

    def keep(function):
        seen.append((function.cls, function.name))
        return function.name == "forward"

    parsed, restored = round_trip(SAMPLE, keep)
    assert restored == SAMPLE
    assert "return x; x += 1" in parsed.text and "return x + 1" not in parsed.text
    assert (None, "helper") in seen and ("Model", "forward") in seen and ("Inner", "method") not in seen
    texts = []
    outline(SAMPLE, lambda function: texts.append(function.text) or True)
    assert texts[0] == 'def helper(x):\n    """Doc."""\n    return x + 1\n'


@pytest.mark.unit
def test_functions_a_codemod_does_not_see_are_set_aside_whole_and_come_back_byte_for_byte():
    parsed = outline(SAMPLE, NOTHING_KEPT, sees=lambda function: function.name == "forward")
    code = cst.parse_module(parsed.text).code
    assert parsed.restore(code) == SAMPLE
    assert "def helper" not in parsed.text and "@functools.cache" not in parsed.text
    assert "def __init__" not in parsed.text
    assert "def forward(self, x):" in parsed.text and "return x; x += 1" not in parsed.text  # seen, its body not read
    assert "class Model:" in parsed.text and "attribute = 1" in parsed.text and "class Inner:" in parsed.text


@pytest.mark.parametrize(
    "source",
    ["def f(:\n    return 1\n", "def f():\r    return 1\r", "type Alias = int\ndef f():\n    return 1\n"],
    ids=["syntax-error", "lone-cr", "newer-syntax-than-this-python"],
)
@pytest.mark.unit
def test_sources_the_standard_parser_cannot_read_are_left_whole(source):
    parsed = outline(source, NOTHING_KEPT)
    if parsed.bodies:  # this Python reads the newer syntax after all
        pytest.skip("this Python parses `type` statements; nothing to fall back from")
    assert parsed.text == source and parsed.restore(source) == source


@pytest.mark.unit
def test_a_codemod_that_changes_a_set_aside_function_is_caught():
    parsed = outline(SAMPLE, NOTHING_KEPT)
    code = cst.parse_module(parsed.text).code
    first_placeholder = next(line for line in code.splitlines(keepends=True) if "<set aside 0 " in line)
    with pytest.raises(RuntimeError, match="3 of 4 set-aside function bodies"):
        parsed.restore(code.replace(first_placeholder, "    return 0\n"))


@pytest.mark.unit
def test_a_body_that_would_come_back_at_another_indentation_is_caught():
    """The outline is what gets compiled: a body must land where it left, or the whole may not compile."""
    parsed = outline(SAMPLE, NOTHING_KEPT)
    code = cst.parse_module(parsed.text).code
    first_placeholder = next(line for line in code.splitlines(keepends=True) if "<set aside 0 " in line)
    with pytest.raises(RuntimeError, match="another indentation"):
        parsed.restore(code.replace(first_placeholder, "        " + first_placeholder.lstrip()))


OUTLINED_IN_CI = ("0.8.4", "0.8.5", "0.10.0", "0.14.0", "0.17.1", "0.18.0", "0.21.0", "0.33.0", "0.34.0")
"""The first and last of each kind of release, and where a file's shape changed; the whole matrix runs them all."""


@pytest.mark.parametrize("version", [release_param(v, v in OUTLINED_IN_CI) for v in ALL_RELEASES])
def test_every_target_file_of_every_release_gets_the_same_verdict_and_text_as_from_a_whole_parse(version, monkeypatch):
    """The real files: outlined and whole, each codemod must say and write exactly the same."""
    assert_outline_changes_nothing(version, every_patch(), monkeypatch)


@pytest.mark.parametrize("version", [release_param(v, v != "0.21.0") for v in ("0.17.1", "0.21.0", "0.33.0")])
def test_the_files_of_the_families_found_by_rule_too(version, monkeypatch):
    """The decoder codemod sets aside whole classes it does not look at: on every file the rule finds."""
    release = Release(release_tree(version) / "vllm")
    catalog_own = {p.name for p in every_patch()}
    found_by_rule = [t for t in every_patch(Found(discover(release, FAMILIES))) if t.name not in catalog_own]
    assert_outline_changes_nothing(version, found_by_rule, monkeypatch)


def assert_outline_changes_nothing(version, patches, monkeypatch) -> None:
    package_dir = release_tree(version) / "vllm"
    release = Release(package_dir)
    compared = 0
    for patch in patches:
        path = patch.locate(release)
        if path is None:
            continue
        source = (package_dir / path).read_text(encoding="utf-8")
        _, restored = round_trip(source)
        assert restored == source, f"{version} {path}: outline round trip"
        outlined = patch.examine(source, release, Options(aux_layers=(1, 2, 3)))
        with monkeypatch.context() as whole:
            whole.setattr(judge, "outline", lambda source, *_: Outline(source, (), ""))
            parsed_whole = patch.examine(source, release, Options(aux_layers=(1, 2, 3)))
        assert (outlined.state, outlined.reason) == (parsed_whole.state, parsed_whole.reason), f"{version} {path}"
        assert outlined.patched == parsed_whole.patched, f"{version} {path}: patched text differs"
        compared += outlined.state is State.UNPATCHED
    assert compared or version == "0.8.4"


LEAN_SAMPLE = '''\
"""A model file."""
from __future__ import annotations

import torch
from torch import (
    nn,
)
# between the imports
from .interfaces import SupportsPP
from .utils import maybe_prefix

if TYPE_CHECKING:
    import transformers

logger = init_logger(__name__); LIMIT = 3


class Model(nn.Module):
    """The decoder."""

    packed = {
        "qkv": ["q", "k", "v"],
    }

    # a comment between an attribute and a method

    def helper(self):
        return 1

    supports_aux_hidden_states_over_pp = False

    @dataclass
    class Inner:
        x: int

    def forward(self, x):
        return x


def unrelated():
    return 2
'''

LEAN_STATEMENTS = lambda statement: "interfaces" in statement.text or "over_pp" in statement.text
LEAN_SEES = lambda function: function.name == "forward"


@pytest.mark.unit
def test_imports_and_attributes_a_codemod_does_not_read_are_set_aside_and_neighbours_share_a_placeholder():
    parsed = outline(LEAN_SAMPLE, NOTHING_KEPT, sees=LEAN_SEES, sees_statement=LEAN_STATEMENTS)
    assert parsed.restore(cst.parse_module(parsed.text).code) == LEAN_SAMPLE
    text = parsed.text
    assert "import torch" not in text and "from torch import" not in text and "maybe_prefix" not in text
    assert "from .interfaces import SupportsPP" in text  # seen: a codemod extends it
    assert '"qkv"' not in text and "supports_aux_hidden_states_over_pp = False" in text
    assert "def helper" not in text and "# a comment between" not in text  # one placeholder for three
    kept = ('"""A model file."""', '"""The decoder."""', "if TYPE_CHECKING:", "class Inner:", "logger = init_logger")
    assert all(line in text for line in kept)  # docstrings, compound and shared-line statements stay
    assert "def unrelated" not in text and "def forward(self, x):" in text
    module = cst.parse_module(text)
    opening = [sole.body[0] for sole in module.body[:5] if isinstance(sole, cst.SimpleStatementLine)]
    kinds = [type(statement).__name__ for statement in opening]
    assert kinds == ["Expr", "Import", "ImportFrom", "Import", "If"][: len(kinds)] and len(parsed.bodies) == 5


@pytest.mark.unit
def test_a_new_import_lands_after_the_imports_set_aside_as_after_the_imports_themselves():
    """``add_import`` puts a new line after the last import: a placeholder for imports is an import."""
    from vllm_eagle3_patch.codemod.cst_tools import add_import

    source = LEAN_SAMPLE.replace("from .interfaces import SupportsPP\n", "")
    parsed = outline(source, NOTHING_KEPT, sees=LEAN_SEES, sees_statement=LEAN_STATEMENTS)
    added = add_import(cst.parse_module(parsed.text), "pkg.interfaces", "SupportsEagle3", "pkg")
    whole = add_import(cst.parse_module(source), "pkg.interfaces", "SupportsEagle3", "pkg")
    assert parsed.restore(added.code) == whole.code
    assert "maybe_prefix\nfrom pkg.interfaces import SupportsEagle3" in whole.code


INIT_SAMPLE = '''\
class Model:
    def __init__(self, config):
        """Doc."""
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        # a comment between two lines set aside: with them
        self.padding_idx = (
            config.pad_token_id
        )
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size)
        if config.tie:
            self.head = self.embed_tokens
        self.a = 1; self.b = 2
        if config.shared:
            self.shared = VocabParallelEmbedding(config.vocab_size)
        for name in ("x", "y"):
            setattr(self, name, None)
        self.norm = RMSNorm(config.hidden_size)

    def forward(self, x):
        return x'''


@pytest.mark.unit
@pytest.mark.parametrize("final_newline", [True, False])
def test_the_lines_of_an_init_a_codemod_does_not_read_are_set_aside_and_come_back(final_newline):
    """Of ``__init__``, only the statements ``reads_statement`` accepts (given their whole text, an ``if`` block's
    too) are parsed; the docstring and lines holding two statements always are.  A method appended after the last
    line of a file without a final newline comes back after a blank line, as from a whole parse."""
    source = INIT_SAMPLE + ("\n" if final_newline else "")
    reads = lambda function, text: "self.config" in text or "Embedding" in text
    parsed = outline(source, lambda function: True, reads_statement=reads)
    assert parsed.text.count("...  # <set aside") == 4  # super() / vocab_size + padding_idx / if tie / for + norm
    for kept in (
        '"""Doc."""',
        "self.config = config",
        "VocabParallelEmbedding(",
        "self.a = 1; self",
        "if config.shared",
    ):
        assert kept in parsed.text
    for aside in (
        "super()",
        "# a comment between",
        "vocab_size =",
        "pad_token_id",
        "if config.tie",
        "setattr",
        "RMSNorm",
    ):
        assert aside not in parsed.text
    method = "\n\n    def added(self):\n        return 1"
    appended = lambda code: code.rstrip("\n") + method + code[len(code.rstrip("\n")) :]  # as LibCST writes it
    assert parsed.restore(appended(parsed.text)) == appended(source)


@pytest.mark.unit
def test_a_decoder_held_deeper_reads_only_the_classes_its_causal_lm_names():
    """OPT, ChatGLM, Gemma-3n: the class the causal LM builds to hold the decoder is found in the codemod, so the
    outline keeps every class the causal LM's text names, and sets the towers, attention and MLP classes aside."""
    family = Family("nested", "model_executor/models/m.py", "Decoder", "CausalLM", ("m",), decoder="self.model.decoder")
    source = (
        "class Attention:\n    pass\n\n\n"
        "class Decoder:\n    def __init__(self):\n        self.attention = Attention()\n\n\n"
        "class Outer:\n    def __init__(self):\n        self.decoder = Decoder()\n\n\n"
        "class CausalLM:\n    def __init__(self, model_type: type[Outer] = Outer):\n        self.model = model_type()\n"
    )
    read = FileReading.of((family,), source, Layouts())
    assert read.outer == {"Outer", "CausalLM"}
    assert [name for name in ("Attention", "Decoder", "Outer", "CausalLM") if read.looks_at(name)] == [
        "Decoder",
        "Outer",
        "CausalLM",
    ]
    assert FileReading.of((family,)).looks_at("Attention")  # the file's layout not known: every class read
