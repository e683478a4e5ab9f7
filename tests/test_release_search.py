"""The release's EAGLE-3 interface is found by searching the tree, and the search holds up on real trees mutated
as a future release plausibly could: a runner moved, a getter renamed, a call removed, the protocol moved.

Each mutation is a view of a real release (its files read through a function, its listing changed), so no tree is
copied but the one the command-line cases write to.  The tool serves each mutated tree correctly, or says
``unknown`` in one line and refuses; it calls a release "without EAGLE-3" only where no file calls the interface.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Optional

import pytest
from helpers.bytes_on_disk import tree_digest
from helpers.cli import run_cli
from helpers.wheel_corpus import ALL_RELEASES, release_tree

from vllm_eagle3_patch.catalog import FAMILIES
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.eagle3.release import (
    DEFAULT_GETTER,
    GETTER,
    NEWEST_TESTED,
    SETTER,
    SETTER_CALL,
    Release,
    newer_than_tested,
)
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderPatch

V2 = "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
V1 = "v1/worker/gpu_model_runner.py"
DEEPSEEK = next(f for f in FAMILIES if f.name == "DeepSeek-V2/V3")
INTERFACES_MODULE = "vllm.model_executor.models.interfaces"
Edit = Callable[[str, Optional[str]], Optional[str]]


def mutated(version: str, edit: Edit, moved: Optional[dict[str, str]] = None) -> Release:
    """A view of ``version``'s tree: ``edit(path, text)`` gives each file's new text (None: the file is gone), and
    ``moved`` renames files (old path -> new path)."""
    moved = moved or {}
    package = release_tree(version) / "vllm"
    original = Release(package)
    back = {new: old for old, new in moved.items()}

    def read(relative: str) -> Optional[str]:
        if relative in moved:
            return None
        return edit(relative, original.read(back.get(relative, relative)))

    def files() -> tuple[str, ...]:
        listed = (moved.get(path, path) for path in original.tree.files())
        return tuple(sorted(path for path in listed if read(path) is not None))

    return Release(package, read, files=files)


def unchanged(path: str, text: Optional[str]) -> Optional[str]:
    return text


def in_file(target: str, old: str, new: str) -> Edit:
    def edit(path: str, text: Optional[str]) -> Optional[str]:
        if path != target or text is None:
            return text
        assert old in text, f"{target} no longer holds {old!r}: pick another mutation"
        return text.replace(old, new)

    return edit


@pytest.mark.parametrize(
    ("version", "runners", "getter"),
    [
        ("0.8.5", (V1,), GETTER),  # duck-typed: no protocol
        ("0.17.1", (V2, V1), GETTER),
        ("0.33.0", (V2, V1), DEFAULT_GETTER),
        ("0.34.0", (V2,), DEFAULT_GETTER),  # V1's runner is gone: V2 alone
    ],
)
def test_the_runners_are_found_wherever_they_live(version: str, runners: tuple[str, ...], getter: str) -> None:
    interface = Release(release_tree(version) / "vllm").interface
    assert interface is not None
    assert interface.runners == tuple(sorted(runners)) and interface.getter == getter
    assert interface.protocol is (version != "0.8.5")


def test_a_release_with_no_call_of_the_interface_has_no_eagle3() -> None:
    release = Release(release_tree("0.8.4") / "vllm")
    assert release.interface is None and release.unknown is None
    assert release.no_eagle3 == f"this vLLM has no EAGLE-3 (no file calls {SETTER})"


def test_a_runner_moved_is_followed() -> None:
    moved = "v1/worker/gpu/speculation/eagle3_wiring.py"
    release = mutated("0.34.0", unchanged, {V2: moved})
    assert release.interface is not None and release.interface.runners == (moved,)
    verdict = DecoderPatch(DEEPSEEK).examine(release.read(DEEPSEEK.path) or "", release, Options())
    assert verdict.state is State.NATIVE  # DeepSeek is native on 0.34.0, judged through the moved runner


def test_a_getter_renamed_in_the_same_words_is_what_the_patched_models_answer() -> None:
    """A release that renames the default-ids getter (still ``get_..._aux_hidden_state_layers``) has the patched
    models answer under the new name: the name comes from the runner's call, never from a table."""
    renamed = "get_default_aux_hidden_state_layers"
    edit = in_file(V2, f".{DEFAULT_GETTER}(", f".{renamed}(")
    release = mutated("0.34.0", edit)
    assert release.interface is not None and release.interface.getter == renamed
    gemma = next(f for f in FAMILIES if f.name == "Gemma 3")
    verdict = DecoderPatch(gemma).examine(release.read(gemma.path) or "", release, Options())
    assert verdict.state is State.UNPATCHED and f"def {renamed}(self)" in (verdict.patched or "")


@pytest.mark.parametrize(
    ("name", "edit", "unknown"),
    [
        pytest.param(
            "getter-unreadable",
            in_file(V2, f"eagle3_model.{DEFAULT_GETTER}()", "default_aux_layers(eagle3_model)"),
            f"{V2} calls {SETTER} but asks no getter this tool can read",
            id="getter-unreadable",
        ),
        pytest.param(
            "call-removed",
            in_file(V2, f"eagle3_model.{SETTER}(aux_layers)", "eagle3_model.aux_layers = aux_layers"),
            f"calls supports_eagle3, but no file calls {SETTER}",
            id="call-removed",
        ),
        pytest.param(
            "protocol-moved",
            in_file(V2, f"from {INTERFACES_MODULE} import", "from vllm.model_executor.models.eagle import"),
            f"the runners import supports_eagle3 from vllm.model_executor.models.eagle, not from {INTERFACES_MODULE}",
            id="protocol-moved",
        ),
    ],
)
def test_what_the_search_cannot_establish_makes_the_release_unknown(name: str, edit, unknown: str) -> None:
    release = mutated("0.34.0", edit)
    assert release.unknown is not None and unknown in release.unknown, release.unknown
    assert release.interface is None
    assert release.no_eagle3.startswith("cannot tell this vLLM's EAGLE-3 interface: ")


def test_runners_asking_different_getters_make_the_release_unknown() -> None:
    release = mutated("0.33.0", in_file(V1, f".{DEFAULT_GETTER}(", f".{GETTER}("))
    assert release.unknown == f"the runners ask different getters ({GETTER}, {DEFAULT_GETTER})"


def test_every_trace_of_the_interface_removed_is_a_release_without_eagle3() -> None:
    def edit(path: str, text: Optional[str]) -> Optional[str]:
        if text is None:
            return None
        return text.replace(f".{SETTER}(", ".set_layers(").replace("supports_eagle3(", "supports_eagle(")

    release = mutated("0.34.0", edit)
    assert release.unknown is None and release.interface is None


def test_the_verdict_cache_follows_what_a_search_finds(release, tmp_path: Path) -> None:
    """A runner renamed changes no file's bytes the verdicts read but the search's answer: the cached verdicts
    must not outlive it (here, the rename of the only runner's file makes it one no search looks in any more)."""
    package = release("0.34.0")
    env = {"VLLM_EAGLE3_PATCH_VERDICT_CACHE": str(tmp_path / "cache")}
    first = json.loads(run_cli("--vllm-dir", str(package), "--json", "status", env=env).stdout)
    assert first["state"] == "unpatched"
    (package / V2).rename(package / (V2 + ".moved"))  # no longer a Python file: the runner is gone
    second = run_cli("--vllm-dir", str(package), "--json", "status", "--check", env=env)
    assert json.loads(second.stdout)["state"] == "unknown" and second.returncode == 1


def test_an_unknown_release_is_refused_in_one_line_and_nothing_is_written(release) -> None:
    package = release("0.34.0")
    runner = package / V2
    text = runner.read_text()
    os.unlink(runner)  # the copy may share the cached file's inode: never write into it
    runner.write_text(text.replace(f"eagle3_model.{DEFAULT_GETTER}()", "default_aux_layers(eagle3_model)"))
    before = tree_digest(package)
    status = run_cli("--vllm-dir", str(package), "status", "--check")
    assert status.returncode == 1 and "state: unknown (cannot tell this vLLM's EAGLE-3 interface: " in status.stdout
    for command in (("apply",), ("diff",), ("apply", "--dry-run")):
        refused = run_cli("--vllm-dir", str(package), *command)
        assert refused.returncode == 1 and refused.stdout == "", command
        assert len(refused.stderr.strip().splitlines()) == 1 and "nothing was changed" in refused.stderr
    model = run_cli("--vllm-dir", str(package), "status", "--check", "--model", "MixtralForCausalLM")
    assert model.returncode == 1 and "MixtralForCausalLM (mixtral.py): unknown (cannot tell" in model.stdout
    assert tree_digest(package) == before


def test_the_newest_release_tested_is_the_corpus_newest() -> None:
    """``status`` calls a release newer than ``NEWEST_TESTED``: it must be the newest the tests download."""
    newest = max(ALL_RELEASES, key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v)))
    assert newest == NEWEST_TESTED


@pytest.mark.unit
@pytest.mark.parametrize(
    ("version", "newer"),
    [("0.34.0", False), ("0.33.0", False), ("0.34.1", True), ("0.35.0rc1", True), ("1.0.0+cu130", True), ("x", False)],
)
def test_newer_than_tested(version: str, newer: bool) -> None:
    assert newer_than_tested(version) is newer


def test_a_release_newer_than_the_tested_ones_is_said_in_one_line(release) -> None:
    """A 0.35.0 (0.34.0's tree under a newer version): ``status`` says so once, judges it by the same search."""
    package = release("0.34.0")
    info = package.parent / "vllm-0.34.0.dist-info"
    renamed = package.parent / "vllm-0.35.0.dist-info"
    info.rename(renamed)
    metadata = renamed / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.34.0", "Version: 0.35.0", 1))
    text = run_cli("--vllm-dir", str(package), "status")
    lines = [line for line in text.stdout.splitlines() if "newer than 0.34.0" in line]
    assert len(lines) == 1 and lines[0].startswith("note: vLLM 0.35.0 is newer than 0.34.0"), text.stdout[:2000]
    data = json.loads(run_cli("--vllm-dir", str(package), "--json", "status").stdout)
    assert data["newer_than_tested"] == "0.34.0" and data["state"] == "unpatched"


def test_the_runners_search_answers_the_same_on_the_patched_tree(release) -> None:
    """``apply`` adds a hundred delegating ``set_aux_hidden_state_layers`` to wrappers: the search's answer (which
    the verdict cache keeps beside each verdict) is the runners all the same, so verdicts stay cached after apply."""
    package_dir = release("0.34.0")
    before = Release(package_dir).tree.search(SETTER_CALL)
    assert run_cli("--vllm-dir", str(package_dir), "apply", "-q").returncode == 0
    patched = Release(package_dir)
    assert patched.tree.search(SETTER_CALL) == before == patched.interface.runners
    assert sum(SETTER_CALL in (patched.read(path) or "") for path in patched.tree.files()) > 50  # the delegations
