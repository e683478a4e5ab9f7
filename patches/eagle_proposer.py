"""The EAGLE proposer's ``load_model``: a multimodal target's image token, read from the fields its config has.

For a multimodal target the proposer copies the target's image token id into the drafter's
``config.image_token_index``, choosing the field by the target's class name: a few named classes
get the field vLLM knows they have, every other target ``config.image_token_index``, which many
configs lack (Kimi-K2.5's calls its token ``media_placeholder_token_id``; an audio-only target has
none): loading the drafter fails with an AttributeError.

Every such read of ``<target>.config.image_token_index`` becomes a call of a small function added
beside the proposer, which reads the first of :data:`IMAGE_TOKEN_FIELDS` the config has, and None
where it has none.  ``image_token_index`` comes first, so wherever the release's read worked it
gives the same value; the named branches are left as they are.
"""

from __future__ import annotations

from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    assigned,
    cst,
    find,
    is_attribute,
    mark,
    names_in,
    replace_node,
    sole_statement,
    statements,
)
from vllm_eagle3_patch.codemod.judge import judge
from vllm_eagle3_patch.codemod.patch import Options, SingleFilePatch, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.release import IMAGE_TOKEN_FIELD, PROPOSER, PROPOSER_FILES, Release

LOAD_MODEL = "load_model"
READER = "_image_token_of"
"""The function the patch adds beside the proposer class."""
IMAGE_TOKEN_FIELDS = (
    IMAGE_TOKEN_FIELD,  # LLaVA and most others, and the release's own read: first, so a config having it keeps it
    "image_token_id",  # Qwen2-VL, Idefics3 and the newer configs
    "vision_config.image_token_id",  # Pixtral's
    "media_placeholder_token_id",  # Kimi-VL's and Kimi-K2.5's
    "img_context_token_id",  # Nemotron Nano VL's
)
"""The fields a multimodal config may hold its image token in, in the order the patched proposer tries them."""


def _reader_code() -> str:
    fields = "".join(f'        "{field}",\n' for field in IMAGE_TOKEN_FIELDS)
    return (
        f"def {READER}(config):\n"
        '    """A multimodal target\'s image token id, from the first of these fields its config has\n'
        '    (None where it has no image token: audio or video only)."""\n'
        f"    for path in (\n{fields}    ):\n"
        '        *parents, field = path.split(".")\n'
        "        holder = config\n"
        "        for parent in parents:\n"
        "            holder = getattr(holder, parent, None)\n"
        "        if hasattr(holder, field):\n"
        "            return getattr(holder, field)\n"
        "    return None\n"
    )


def _reads_image_token_index(node: cst.CSTNode) -> bool:
    """``<target>.config.image_token_index``"""
    return is_attribute(node, IMAGE_TOKEN_FIELD) and is_attribute(node.value, "config")


def _config_reads(function: cst.FunctionDef) -> list[cst.Attribute]:
    """Every ``<x>.config.image_token_index`` in ``function`` that is read, not assigned to."""
    written = {id(target.target) for target in find(function, cst.AssignTarget)}
    return [node for node in find(function, cst.Attribute, _reads_image_token_index) if id(node) not in written]


def _copies_image_token_index(line: cst.CSTNode) -> bool:
    """``<drafter>.image_token_index = <target>.config.image_token_index``, alone on its line."""
    statement = sole_statement(line)
    return (
        isinstance(statement, cst.Assign)
        and is_attribute(assigned(statement), IMAGE_TOKEN_FIELD)
        and _reads_image_token_index(statement.value)
    )


class ImageTokenFromConfig:
    """``<drafter>.image_token_index = _image_token_of(<target>.config)``, and ``_image_token_of`` itself."""

    def transform_module(self, tree: cst.Module) -> cst.Module:
        copying = _copying_load_models(tree)
        if READER in names_in(tree):
            raise Unrecognised(f"the name {READER} is taken in this module")
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            patched = statement
            for cls, load_model in copying:
                if cls is statement:
                    patched = replace_node(patched, load_model, _reading_through_reader(load_model, tree))
            body.append(patched)
            if statement is copying[0][0]:  # the function goes right after the first class that calls it
                reader = mark(statements(_reader_code(), tree)[0])
                body.append(reader.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2))
        return tree.with_changes(body=body)


def _copying_load_models(tree: cst.Module) -> list[tuple[cst.ClassDef, cst.FunctionDef]]:
    """The ``load_model`` methods copying a target config's ``image_token_index``, each read of it a plain copy."""
    found = []
    for cls, load_model in _load_models(tree):
        reads = _config_reads(load_model)
        copies = find(load_model, cst.SimpleStatementLine, _copies_image_token_index)
        if len(reads) != len(copies):
            raise Unrecognised(
                f"in {cls.name.value}.{LOAD_MODEL}, {len(reads) - len(copies)} read(s) of "
                f"<target>.config.{IMAGE_TOKEN_FIELD} outside `<drafter>.{IMAGE_TOKEN_FIELD} = ...` alone on its line"
            )
        if copies:
            found.append((cls, load_model))
    if not found:
        raise Unrecognised(f"expected in {LOAD_MODEL} a copy of <target>.config.{IMAGE_TOKEN_FIELD}, found none")
    return found


def _reading_through_reader(load_model: cst.FunctionDef, tree: cst.Module) -> cst.FunctionDef:
    """``load_model`` with every image-token copy reading through :data:`READER`, each on its own marked line."""
    code = cst.Module([]).code_for_node
    for line in find(load_model, cst.SimpleStatementLine, _copies_image_token_index):
        statement = line.body[0]
        assert isinstance(statement, cst.Assign) and isinstance(statement.value, cst.Attribute)  # what was found
        target, source = statement.targets[0].target, statement.value
        (call,) = statements(f"{code(target)} = {READER}({code(source.value)})\n", tree)
        load_model = replace_node(load_model, line, mark(call).with_changes(leading_lines=line.leading_lines))
    return load_model


def _load_models(tree: cst.Module) -> list[tuple[cst.ClassDef, cst.FunctionDef]]:
    """Every class's ``load_model`` method (the proposer, its base and its subclasses)."""
    return [
        (cls, statement)
        for cls in tree.body
        if isinstance(cls, cst.ClassDef)
        for statement in cls.body.body
        if isinstance(statement, cst.FunctionDef) and statement.name.value == LOAD_MODEL
    ]


def _native(module: cst.Module) -> Optional[str]:
    if not any(_config_reads(load_model) for _, load_model in _load_models(module)):
        return f"the proposer reads no target config's {IMAGE_TOKEN_FIELD} (no generic read to make safe)"
    return None


def names_target(source: str, architecture: str) -> bool:
    """Whether the proposer ``source`` names ``architecture`` (a branch of its own for it): cheap, no parsing."""
    return f'"{architecture}"' in source


class EagleProposerPatch(SingleFilePatch):
    name = "EAGLE proposer"
    path = PROPOSER

    def locate(self, release: Release) -> Optional[str]:
        """The file whose ``load_model`` copies a multimodal target's image token (None: no proposer does)."""
        return next((path for path in PROPOSER_FILES if IMAGE_TOKEN_FIELD in (release.read(path) or "")), None)

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        return judge(source, ImageTokenFromConfig, native=_native, reads=lambda function: function.name == LOAD_MODEL)


PATCH = EagleProposerPatch()
