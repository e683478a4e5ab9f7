"""Every vLLM release on PyPI that the tool knows about, patched and reverted for real."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import environments
from helpers.bytes_on_disk import record_mismatches, tree_digest
from helpers.cli import run_cli
from helpers.declared_support import declares_eagle3, runner_classes
from helpers.inner_suite import run_inside
from helpers.selection import whole_matrix_only
from helpers.wheel_corpus import FAMILIES_ONLY, PATCHABLE_CORE, PATCHABLE_LEGACY, UNSUPPORTED

from vllm_eagle3_patch.catalog import DEEPSEEK_V2, FAMILIES, NAMED_WRAPPERS
from vllm_eagle3_patch.eagle3.release import PROPOSER_FILES, Release

pytestmark = pytest.mark.matrix  # every release of the corpus, each with its inner suite: the full command's


def status(package_dir) -> dict:
    completed = run_cli("--vllm-dir", str(package_dir), "status", "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


DEFAULT_RELEASES = ("0.8.5", "0.10.1", "0.12.0", "0.17.1")
"""The releases the README's command runs: the first patchable one (legacy interpreter, before
``SupportsEagle3``), the first with the protocol, the first with the fourth layer argument, and the last one
DeepSeek needs the patch on (Kimi-K2.5 among its families).  ``VLLM_EAGLE3_PATCH_RELEASES=all`` runs all 22
(docs/testing.md); the others share their loop shapes and gate files with one of these (0.10.0 with 0.8.5,
0.15.0's Kimi-K2.5 with 0.17.1's)."""


def matrix_release(version: str, interpreter: str):
    chosen = os.environ.get("VLLM_EAGLE3_PATCH_RELEASES", "")
    wanted = version in DEFAULT_RELEASES if not chosen else chosen == "all" or version in chosen.split(",")
    marks = () if wanted else pytest.mark.skip(reason="not selected; VLLM_EAGLE3_PATCH_RELEASES=all runs every release")
    return pytest.param(version, interpreter, id=version, marks=marks)


RELEASES = [matrix_release(v, "legacy_python") for v in PATCHABLE_LEGACY] + [
    matrix_release(v, "cpu_python") for v in PATCHABLE_CORE
]


@pytest.mark.parametrize(("version", "interpreter"), RELEASES)
def test_patch_verify_revert(version, interpreter, release, request):
    """status unpatched -> apply -> patched and compiling -> the patched code behaves (inner
    suite) -> apply again changes nothing -> revert gives back the wheel's bytes."""
    python = request.getfixturevalue(interpreter)
    package_dir = release(version)
    before = status(package_dir)
    assert before["vllm_version"] == version
    assert before["state"] == "unpatched", before
    targets = {t["file"]: t["state"] for t in before["targets"]}
    # the model, the gate, Kimi-K2.5 (0.15.0+), the families; files the rule cannot follow are left alone
    assert set(targets.values()) <= {"unpatched", "unsupported"}, targets
    assert targets[DEEPSEEK_V2.path] == "unpatched"
    left_alone = {f: (package_dir / f).read_bytes() for f, s in targets.items() if s == "unsupported"}

    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 0, applied.stderr
    after = status(package_dir)
    assert after["state"] == "patched", after
    for target in after["targets"]:
        assert target["state"] in ("patched", "native") or target["file"] in left_alone, target
        path = package_dir / target["file"]
        compile(path.read_bytes(), str(path), "exec")
    assert {f: (package_dir / f).read_bytes() for f in left_alone} == left_alone

    inner = run_inside(python, package_dir)
    assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-3000:]

    patched_tree = tree_digest(package_dir)
    again = run_cli("--vllm-dir", str(package_dir), "apply")
    assert again.returncode == 0 and "already patched" in again.stdout
    assert run_cli("--vllm-dir", str(package_dir), "diff").stdout == ""
    assert tree_digest(package_dir) == patched_tree

    reverted = run_cli("--vllm-dir", str(package_dir), "revert")
    assert reverted.returncode == 0, reverted.stderr
    assert record_mismatches(package_dir) == []
    assert not (package_dir / ".vllm-eagle3-patch").exists()
    assert status(package_dir)["state"] == "unpatched"


def test_the_unpatched_tree_fails_the_inner_suite(release, cpu_python):
    """The behaviour checks can fail: on the original 0.17.1 they must."""
    inner = run_inside(cpu_python, release("0.17.1"))
    assert inner.returncode == 1, inner.stdout[-3000:]


RUNNER_CLASSES = runner_classes(FAMILIES, NAMED_WRAPPERS)
"""Every file of the catalog's families and of the wrappers it names, and the class in it the runner holds."""
REQUIRED_FILES = set(runner_classes((DEEPSEEK_V2,), NAMED_WRAPPERS[:1]))
FAMILY_FILES = set(RUNNER_CLASSES) - REQUIRED_FILES
"""DeepSeek's model and Kimi-K2.5's wrapper: vLLM's own EAGLE-3 on every release these tests run."""
WRAPPER_TEST = "test_family_behaviour.py::test_gemma3_multimodal_wrapper_delegates"
FAMILY_RELEASES = [
    # the first release whose runner asks EagleModelMixin's getter, as 0.33.0 (CI's) does
    pytest.param("0.18.0", "cpu_python", (), id="0.18.0", marks=whole_matrix_only()),
    # the last whitelist; Qwen3-Next half native (the whitelist's verdicts: tests/test_gate_verdicts.py)
    pytest.param("0.21.0", "engine_python", (), id="0.21.0", marks=whole_matrix_only()),
    *(pytest.param(v, None, (), id=v) for v in FAMILIES_ONLY if v not in ("0.18.0", "0.21.0", "0.33.0")),
    # transformers 5's Gemma 3 image processor needs torchvision, which has no CPU-torch build here
    pytest.param("0.33.0", "modern_python", ("--deselect", WRAPPER_TEST), id="0.33.0"),
]


@pytest.mark.parametrize(("version", "interpreter", "inner_args"), FAMILY_RELEASES)
def test_families_on_releases_with_native_deepseek(version, interpreter, inner_args, release, request):
    """0.18.0 and later: DeepSeek's files are native and keep their bytes; the families' files (and
    the gate where it still has a whitelist) are patched and behave (the inner suite's family tests,
    in the releases chosen for it: the first, the last with a whitelist and the newest), apply again
    changes nothing, revert gives back the wheel's bytes."""
    package_dir = release(version)
    before = status(package_dir)
    targets = {t["file"]: t["state"] for t in before["targets"]}
    assert before["state"] == "unpatched" and "native for DeepSeek-V2/V3" in before["reason"], before
    # native where the wheel's own file gives the runner's class the protocol (an independent reading), else patched
    expected = {f: declared_state(package_dir, f) for f in RUNNER_CLASSES}
    assert runner_states(package_dir, targets) == expected
    assert {expected[f] for f in REQUIRED_FILES} == {"native"}, expected
    natives = {f for f, s in targets.items() if s == "native"}
    assert natives - {Release(package_dir).gate_file} - set(RUNNER_CLASSES) == set(), natives
    native_bytes = {f: (package_dir / f).read_bytes() for f in targets if targets[f] == "native"}

    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 0, applied.stderr
    after = status(package_dir)
    assert after["state"] == "patched", after
    assert {t["file"] for t in after["targets"] if t["state"] == "patched"} == {
        f for f, s in targets.items() if s == "unpatched"
    }
    assert {f: (package_dir / f).read_bytes() for f in native_bytes} == native_bytes
    for path in (f for f in FAMILY_FILES if targets.get(f) == "unpatched"):
        text = (package_dir / path).read_text()
        compile(text, path, "exec")
        assert (
            "def get_eagle3_default_aux_hidden_state_layers(self)" in text
            and "def get_eagle3_aux_hidden_state_layers" not in text
        )

    if interpreter is not None:
        inner = run_inside(
            request.getfixturevalue(interpreter), package_dir, *inner_args, suite="test_family_behaviour.py"
        )
        assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-3000:]

    patched_tree = tree_digest(package_dir)
    again = run_cli("--vllm-dir", str(package_dir), "apply")
    assert again.returncode == 0 and "already patched" in again.stdout
    assert tree_digest(package_dir) == patched_tree
    assert run_cli("--vllm-dir", str(package_dir), "revert").returncode == 0
    assert record_mismatches(package_dir) == []
    assert status(package_dir)["state"] == "unpatched"


def runner_states(package_dir, targets: dict[str, str]) -> dict[str, str]:
    """``status``'s state of each file of :data:`RUNNER_CLASSES`: its row, or for a wrapper the multimodal rule
    finds native (no file to patch, so no row) its architecture's verdict."""
    completed = run_cli("--vllm-dir", str(package_dir), "status", "--architectures", "--json")
    verdicts = {v["cls"]: v["verdict"] for v in json.loads(completed.stdout)["architectures"]}
    return {f: targets[f] if f in targets else verdicts.get(cls, "missing") for f, cls in RUNNER_CLASSES.items()}


def declared_state(package_dir, path: str) -> str:
    """``native`` where the file, as the wheel holds it, gives the runner's class ``SupportsEagle3``
    (``helpers/declared_support.py``); else ``unpatched``, for apply to patch."""
    source = (package_dir / path).read_text() if (package_dir / path).is_file() else None
    return "native" if declares_eagle3(source, RUNNER_CLASSES[path]) else "unpatched"


def test_qwen3_5_on_its_own_interpreter(release):
    """Qwen3.5 on 0.17.1, the release before upstream's support: ``qwen3_5.py`` imports transformers'
    Qwen2-VL video processor, which needs torchvision, so its family tests run in the engine
    interpreter (PyPI's torch and torchvision) rather than with the other releases.  Unpatched they
    fail; patched, its model runs Qwen3-Next's patched forward, and its text-only causal LMs and
    its multimodal class (Qwen3-VL's methods) reach it."""
    python = environments.engine_python("2.10.0")
    package_dir = release("0.17.1")
    # 0.17.1's runners relay nothing across pipeline ranks: those tests skip there by design.
    selected = ("-k", "qwen3_5 and not cross_pipeline_ranks", "-rs")
    unpatched = run_inside(python, package_dir, *selected, suite="test_family_behaviour.py")
    assert unpatched.returncode == 1, unpatched.stdout[-3000:]
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    inner = run_inside(python, package_dir, *selected, suite="test_family_behaviour.py")
    assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-3000:]
    assert "skipped" not in inner.stdout.splitlines()[-1], inner.stdout[-3000:]
    assert run_cli("--vllm-dir", str(package_dir), "revert").returncode == 0
    assert record_mismatches(package_dir) == []


def test_the_unpatched_newest_release_fails_the_family_tests(release, modern_python):
    """The family tests bite on the newest release too: unpatched, they must fail."""
    inner = run_inside(
        modern_python, release(FAMILIES_ONLY[-1]), "--deselect", WRAPPER_TEST, suite="test_family_behaviour.py"
    )
    assert inner.returncode == 1, inner.stdout[-3000:]


PROPOSER_RELEASES = [
    pytest.param("0.17.1", "engine_python", id="0.17.1"),  # the token chosen in eagle.py; Kimi-K2.5 not named yet
    # in llm_base_proposer.py, Kimi-K2.5 named upstream (0.33.0's proposer lives there too)
    pytest.param("0.21.0", "engine_python", id="0.21.0", marks=whole_matrix_only()),
    pytest.param("0.33.0", "modern_python", id="0.33.0"),  # the newest
]


@pytest.mark.parametrize(("version", "interpreter"), PROPOSER_RELEASES)
def test_proposer_reads_every_multimodal_config(version, interpreter, release, request):
    """The file holding the proposer's ``load_model`` is the proposer's target: unpatched, the inner proposer
    tests fail for the configs without ``image_token_index``; patched (and nothing else), they pass; revert
    gives back the wheel's bytes."""
    python = request.getfixturevalue(interpreter)
    package_dir = release(version)
    (proposer,) = [t for t in status(package_dir)["targets"] if t["file"] in PROPOSER_FILES]
    assert proposer["state"] == "unpatched", proposer
    unpatched = run_inside(python, package_dir, suite="test_eagle_proposer.py")
    assert unpatched.returncode == 1 and "image_token_index" in unpatched.stdout, unpatched.stdout[-3000:]

    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 0, applied.stderr
    targets = {t["file"]: t["state"] for t in status(package_dir)["targets"]}
    assert targets[proposer["file"]] == "patched"
    inner = run_inside(python, package_dir, "-rs", suite="test_eagle_proposer.py")
    assert inner.returncode == 0 and "skipped" not in inner.stdout, inner.stdout[-6000:] + inner.stderr[-3000:]

    assert run_cli("--vllm-dir", str(package_dir), "revert").returncode == 0
    assert record_mismatches(package_dir) == []


WRAPPER_RELEASES = [
    # 0.17.1's run in test_patch_verify_revert's inner suite: 39 of its 49 classes import with the engine's extras
    pytest.param("0.33.0", "modern_python", 20, id="0.33.0"),  # 24 of 52: most vision ones want torchvision
]


@pytest.mark.parametrize(("version", "interpreter", "at_least"), WRAPPER_RELEASES)
def test_multimodal_wrappers_hand_eagle3_on(version, interpreter, at_least, release, request):
    """The multimodal classes found by rule: unpatched, the release's ``supports_eagle3`` refuses them; patched,
    each that imports in this interpreter passes it and hands both methods on (``test_multimodal_wrappers.py``,
    its skips naming the missing optional dependency); revert gives back the wheel's bytes."""
    python = request.getfixturevalue(interpreter)
    package_dir = release(version)
    unpatched = run_inside(python, package_dir, "-x", suite="test_multimodal_wrappers.py")
    assert unpatched.returncode == 1 and "supports_eagle3" in unpatched.stdout, unpatched.stdout[-3000:]
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    inner = run_inside(python, package_dir, suite="test_multimodal_wrappers.py")
    assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-3000:]
    passed = int(re.search(r"(\d+) passed", inner.stdout.splitlines()[-1]).group(1))
    assert passed >= at_least, inner.stdout[-3000:]
    assert run_cli("--vllm-dir", str(package_dir), "revert").returncode == 0
    assert record_mismatches(package_dir) == []


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_releases_without_eagle3_are_refused(version, release):
    package_dir = release(version)
    untouched = tree_digest(package_dir.parent)
    report = status(package_dir)
    assert report["state"] == "unsupported"
    assert "no EAGLE-3" in report["reason"]
    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 1
    assert applied.stderr.count("\n") == 1 and DEEPSEEK_V2.path.rsplit("/", 1)[-1] in applied.stderr
    assert tree_digest(package_dir.parent) == untouched
