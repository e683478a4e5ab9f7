"""Every vLLM release on PyPI that the tool knows about, patched and reverted for real."""

from __future__ import annotations

import json

import pytest

from conftest import record_mismatches, run_cli, run_inside, tree_digest
from wheel_corpus import NATIVE, PATCHABLE_CORE, PATCHABLE_LEGACY, UNSUPPORTED


def status(package_dir) -> dict:
    completed = run_cli("--vllm-dir", str(package_dir), "status", "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


RELEASES = [pytest.param(v, "legacy_python", id=v) for v in PATCHABLE_LEGACY] + [
    pytest.param(v, "cpu_python", id=v) for v in PATCHABLE_CORE
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
    assert set(targets.values()) == {"unpatched"}, targets  # the model, the gate, Kimi-K2.5 (0.15.0+)
    assert "model_executor/models/deepseek_v2.py" in targets

    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 0, applied.stderr
    after = status(package_dir)
    assert after["state"] == "patched", after
    for target in after["targets"]:
        assert target["state"] in ("patched", "native"), target
        path = package_dir / target["file"]
        compile(path.read_bytes(), str(path), "exec")

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


@pytest.mark.parametrize("version", NATIVE)
def test_native_releases_are_left_alone(version, release):
    package_dir = release(version)
    untouched = tree_digest(package_dir.parent)
    assert status(package_dir)["state"] == "native"
    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 0 and "natively" in applied.stdout
    assert run_cli("--vllm-dir", str(package_dir), "diff").stdout == ""
    assert tree_digest(package_dir.parent) == untouched


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_releases_without_eagle3_are_refused(version, release):
    package_dir = release(version)
    untouched = tree_digest(package_dir.parent)
    report = status(package_dir)
    assert report["state"] == "unsupported"
    assert "no EAGLE-3" in report["reason"]
    applied = run_cli("--vllm-dir", str(package_dir), "apply")
    assert applied.returncode == 1
    assert applied.stderr.count("\n") == 1 and "deepseek_v2.py" in applied.stderr
    assert tree_digest(package_dir.parent) == untouched
