"""``doctor`` on real release trees, with drafter and target configs in the shapes public ones have.

The configs are synthetic ``config.json`` files (shapes, not vLLM code); every verdict is
checked through the real command, and every suggested fix is run to show that it fixes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from helpers.bytes_on_disk import tree_digest
from helpers.cli import run_cli

FIELD = "eagle_aux_hidden_state_layer_ids"
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 129280,
}
KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": DEEPSEEK_V3}
LLAMA_DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 7168,
    "num_hidden_layers": 1,
    "vocab_size": 129280,
    "draft_vocab_size": 32000,
}
SPECFORGE_DEEPSEEK_V3 = {**LLAMA_DRAFTER, "eagle_config": {FIELD: [1, 29, 57], "use_aux_hidden_state": True}}
SPECFORGE_KIMI_K2 = {**LLAMA_DRAFTER, "eagle_config": {FIELD: [2, 30, 58], "use_aux_hidden_state": True}}
MLA_DRAFTER = {**LLAMA_DRAFTER, "architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}


@pytest.fixture
def checkpoints(tmp_path):
    """``checkpoints(drafter_config, target_config)`` -> (drafter_dir, target_dir)."""

    def write(drafter: dict, target: dict = DEEPSEEK_V3):
        paths = []
        for name, config in (("drafter", drafter), ("target", target)):
            directory = tmp_path / name
            directory.mkdir(exist_ok=True)
            (directory / "config.json").write_text(json.dumps(config))
            paths.append(directory)
        return tuple(paths)

    return write


def doctor(package_dir, drafter, target=None, *extra):
    args = ["--vllm-dir", str(package_dir), "doctor", "--drafter", str(drafter), *extra]
    if target is not None:
        args += ["--target", str(target)]
    completed = run_cli(*args, "--json")
    report = json.loads(completed.stdout)
    assert completed.returncode == (0 if report["consistent"] else 1), completed.stderr
    return report


def finding(report, check):
    (found,) = [f for f in report["findings"] if f["check"] == check]
    return found


def run_fix(command: str) -> None:
    """Run a fix exactly as printed, the tool's own command resolved to this interpreter."""
    if command.startswith("vllm-eagle3-patch "):
        command = f"{shlex.quote(sys.executable)} -m vllm_eagle3_patch {command[len('vllm-eagle3-patch ') :]}"
    subprocess.run(command, shell=True, check=True, capture_output=True)


def test_specforge_deepseek_v3_drafter_on_unpatched_then_patched_vllm(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(SPECFORGE_DEEPSEEK_V3)
    untouched = tree_digest(package_dir.parent)
    report = doctor(package_dir, drafter, target)
    assert tree_digest(package_dir.parent) == untouched  # doctor writes nothing
    assert report["consistent"] is False
    assert finding(report, "vLLM")["verdict"] == "problem"
    assert finding(report, "convention")["verdict"] == "ok" and "sglang" in finding(report, "convention")["detail"]
    assert "model runner V1 (the default on a GPU) ignores them" in finding(report, "ids")["detail"]
    assert report["captured"] == report["expected"] == [2, 30, 58]

    run_fix(finding(report, "vLLM")["fix"])
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] is True, report
    assert all(f["verdict"] in ("ok", "note") for f in report["findings"])


def test_the_old_readme_example_is_caught_and_its_fix_works(release, checkpoints):
    """``apply --aux-layers 1,29,57`` for a SpecForge DeepSeek-V3 drafter is one layer off."""
    package_dir = release("0.17.1")
    drafter, target = checkpoints(SPECFORGE_DEEPSEEK_V3)
    assert run_cli("--vllm-dir", str(package_dir), "apply", "--aux-layers", "1,29,57").returncode == 0
    report = doctor(package_dir, drafter, target)
    layers = finding(report, "layers")
    assert layers["verdict"] == "problem" and report["captured"] == [1, 29, 57] and report["expected"] == [2, 30, 58]
    assert layers["fix"].endswith("apply --aux-layers 2,30,58")
    run_fix(layers["fix"])
    assert doctor(package_dir, drafter, target)["consistent"] is True


def test_ambiguous_nested_ids_are_undecided_until_chosen(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(SPECFORGE_KIMI_K2, KIMI_K25)
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] is False and report["expected"] is None
    convention = finding(report, "convention")
    assert convention["verdict"] == "unknown" and "--ids-convention" in convention["fix"]
    assert finding(report, "layers")["verdict"] == "unknown"
    assert "[2, 30, 58] (vllm) or [3, 31, 59] (sglang)" in finding(report, "layers")["detail"]


@pytest.mark.parametrize(("version", "reads"), [("0.11.0", False), ("0.11.1", True)])
def test_top_level_ids_are_read_from_0_11_1(release, checkpoints, version, reads):
    package_dir = release(version)
    drafter, target = checkpoints({**LLAMA_DRAFTER, FIELD: [3, 31, 59]})
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    assert (f"reads {FIELD} [3, 31, 59]: layers [3, 31, 59]" in finding(report, "ids")["detail"]) is reads
    assert report["expected"] == [3, 31, 59]
    if reads:
        assert report["consistent"] is True and report["captured"] == [3, 31, 59]
        return
    layers = finding(report, "layers")
    assert layers["verdict"] == "problem" and report["captured"] == [2, 30, 58]
    run_fix(layers["fix"])
    assert doctor(package_dir, drafter, target)["captured"] == [3, 31, 59]


def test_top_level_sglang_ids_read_by_vllm_need_the_config_fixed(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints({**LLAMA_DRAFTER, FIELD: [1, 29, 57]})
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    layers = finding(report, "layers")
    assert layers["verdict"] == "problem" and report["captured"] == [1, 29, 57]
    assert layers["fix"].startswith("python3 -c")  # the target's ids cannot win over the drafter's here
    run_fix(layers["fix"])
    assert doctor(package_dir, drafter, target)["consistent"] is True


def test_a_drafter_without_ids_gets_the_default(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(LLAMA_DRAFTER)
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] is True and report["captured"] == [2, 30, 58]


@pytest.mark.parametrize(
    ("config", "version", "loads"),
    [
        pytest.param(LLAMA_DRAFTER, "0.9.2", False, id="llama-0.9.2-renamed-to-Eagle3LlamaForCausalLMEagle3"),
        pytest.param(LLAMA_DRAFTER, "0.10.1", False, id="llama-0.10.1-commented-out"),
        pytest.param(LLAMA_DRAFTER, "0.10.2", True, id="llama-0.10.2"),
        pytest.param(LLAMA_DRAFTER, "0.17.1", True, id="llama-0.17.1"),
        pytest.param(MLA_DRAFTER, "0.8.5", False, id="mla-0.8.5-always-llama"),
        pytest.param(MLA_DRAFTER, "0.17.1", False, id="mla-0.17.1"),
        pytest.param(MLA_DRAFTER, "0.18.0", True, id="mla-0.18.0"),
    ],
)
def test_drafter_architecture_by_release(release, checkpoints, config, version, loads):
    """Read from each release's registry and EAGLEConfig; a Llama drafter's fix is run, an MLA
    drafter's is an upgrade."""
    package_dir = release(version)
    drafter, target = checkpoints(config)
    architecture = finding(doctor(package_dir, drafter, target), "architecture")
    assert (architecture["verdict"] == "ok") is loads, architecture
    if loads:
        return
    if config is MLA_DRAFTER:
        assert "vllm>=0.18.0" in architecture["fix"]
        return
    run_fix(architecture["fix"])
    assert finding(doctor(package_dir, drafter, target), "architecture")["verdict"] == "ok"


def test_a_speculators_format_drafter_is_not_guessed_at(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(
        {**LLAMA_DRAFTER, "speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"]}
    )
    report = doctor(package_dir, drafter, target)
    assert finding(report, "architecture")["verdict"] == "unknown" and report["consistent"] is False


SPECULATORS_EAGLE3 = {  # the fields speculators 0.9.0 writes (tests/engine/test_training_engine.py trains one)
    "architectures": ["Eagle3DraftModel"],
    "speculators_model_type": "eagle3",
    "draft_vocab_size": 32000,
    FIELD: [3, 30, 57],
    "target_hidden_size": None,
    "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"speculative_tokens": 3}]},
    "transformer_layer_config": {
        "model_type": "llama",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "vocab_size": 129280,
    },
}


def test_a_speculators_drafter_is_checked_as_the_release_converts_it(release, checkpoints):
    """vLLM converts the config with its own per-type function (read from the tree, evaluated, never imported):
    the layer's shape from ``transformer_layer_config``, the class it names, and the ids where it copies them."""
    package_dir = release("0.17.1")
    assert run_cli("--vllm-dir", str(package_dir), "apply", "-q").returncode == 0
    drafter, target = checkpoints(SPECULATORS_EAGLE3)
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] is True and report["captured"] == report["expected"] == [3, 30, 57], report
    assert "Eagle3LlamaForCausalLM" in finding(report, "architecture")["detail"]
    layer = {**SPECULATORS_EAGLE3["transformer_layer_config"], "hidden_size": 4096}
    drafter, target = checkpoints({**SPECULATORS_EAGLE3, "transformer_layer_config": layer})
    assert finding(doctor(package_dir, drafter, target), "hidden size")["verdict"] == "problem"
    # 0.34.0 picks the class by the layer's model type and raises for one it lacks: not followed, so not checked
    qwen3 = {**SPECULATORS_EAGLE3, "transformer_layer_config": {**layer, "model_type": "qwen3"}}
    mistral = {**SPECULATORS_EAGLE3, "transformer_layer_config": {**layer, "model_type": "mistral"}}
    newest = release("0.34.0")
    drafter, target = checkpoints(qwen3)
    assert "Eagle3Qwen3ForCausalLM" in finding(doctor(newest, drafter, target), "architecture")["detail"]
    drafter, target = checkpoints(mistral)
    assert finding(doctor(newest, drafter, target), "architecture")["verdict"] == "unknown"


def test_wrong_hidden_size_and_vocabulary(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(
        {**LLAMA_DRAFTER, "hidden_size": 4096, "vocab_size": 128256, "draft_vocab_size": 32000}
    )
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] is False
    assert finding(report, "hidden size")["verdict"] == "problem" and "4096" in finding(report, "hidden size")["detail"]
    assert finding(report, "vocabulary")["verdict"] == "problem"


def test_target_hidden_size_of_the_drafter_counts(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints({**LLAMA_DRAFTER, "hidden_size": 4096, "target_hidden_size": 7168})
    assert finding(doctor(package_dir, drafter, target), "hidden size")["verdict"] == "ok"


def safetensors_header(directory, tensors: dict[str, list[int]]) -> None:
    header = json.dumps(
        {name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]} for name, shape in tensors.items()}
    )
    (directory / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header.encode())


def test_checkpoint_shapes_d2t_and_fc(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(LLAMA_DRAFTER)
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    safetensors_header(drafter, {"fc.weight": [7168, 3 * 7168], "d2t": [32000]})
    assert doctor(package_dir, drafter, target)["consistent"] is True
    safetensors_header(drafter, {"fc.weight": [7168, 2 * 7168]})
    report = doctor(package_dir, drafter, target)
    assert finding(report, "draft vocabulary")["verdict"] == "problem"
    assert "fc takes 2 hidden states" in finding(report, "layers")["detail"]


def test_a_tiny_target_gets_three_distinct_ids(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints({**LLAMA_DRAFTER, FIELD: [1, 2, 3]}, {**DEEPSEEK_V3, "num_hidden_layers": 4})
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    assert report["captured"] == [1, 2, 3] and report["consistent"] is True
    drafter, target = checkpoints(LLAMA_DRAFTER, {**DEEPSEEK_V3, "num_hidden_layers": 4})
    report = doctor(package_dir, drafter, target)
    assert report["captured"] == [1, 2, 3] and finding(report, "layers")["verdict"] == "unknown"


def test_without_a_target_the_layers_are_unknown(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, _ = checkpoints(SPECFORGE_DEEPSEEK_V3)
    report = doctor(package_dir, drafter)
    assert report["consistent"] is False and report["target"] is None
    assert (
        finding(report, "hidden size")["verdict"] == "unknown" and "--target" in finding(report, "hidden size")["fix"]
    )
    assert finding(report, "layers")["verdict"] == "unknown"
    assert finding(report, "vLLM")["verdict"] == "unknown" and "DeepSeek" not in json.dumps(report)


def test_text_output_is_one_line_per_finding_with_its_fix(release, checkpoints):
    package_dir = release("0.17.1")
    drafter, target = checkpoints(SPECFORGE_DEEPSEEK_V3)
    completed = run_cli("--vllm-dir", str(package_dir), "doctor", "--drafter", str(drafter), "--target", str(target))
    assert completed.returncode == 1
    lines = completed.stdout.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("verdict: not consistent")  # nine findings
    (problem,) = [line for line in lines if line.startswith("problem")]
    assert problem.endswith(f"fix: vllm-eagle3-patch --vllm-dir {package_dir} apply")


def test_bad_drafter_config_is_one_line_exit_1(release, tmp_path):
    (tmp_path / "config.json").write_text("{oops")
    completed = run_cli("--vllm-dir", str(release("0.17.1")), "doctor", "--drafter", str(tmp_path))
    assert (
        completed.returncode == 1
        and completed.stderr.count("\n") == 1
        and "config.json: not valid JSON" in completed.stderr
    )
    assert run_cli("doctor", "--help").returncode == 0
    assert run_cli("doctor").returncode == 2


def test_deepseek_is_judged_by_its_own_file_where_only_the_families_need_the_patch(release, checkpoints):
    """0.18.0+: DeepSeek is native while the other families' files are unpatched; a DeepSeek
    target needs no apply there, and captures upstream's default."""
    package_dir = release("0.18.0")
    drafter, target = checkpoints(LLAMA_DRAFTER)
    report = doctor(package_dir, drafter, target)
    assert report["state"] == "unpatched"
    vllm = finding(report, "vLLM")
    assert vllm["verdict"] == "ok" and "unpatched" in vllm["detail"] and not vllm["fix"], vllm
    assert finding(report, "layers")["verdict"] == "ok" and report["captured"] == [2, 30, 58]
    assert "own default" in finding(report, "layers")["detail"]


GEMMA3_TEXT = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 7168,
    "num_hidden_layers": 26,
    "vocab_size": 129280,
}


def test_every_family_is_judged_by_its_own_files_and_ids(release, checkpoints):
    """A Gemma 3 target: refused until its file is patched, then the patched default is what vLLM captures."""
    package_dir = release("0.18.0")
    drafter, target = checkpoints(LLAMA_DRAFTER, GEMMA3_TEXT)
    before = doctor(package_dir, drafter, target)
    vllm = finding(before, "vLLM")
    assert vllm["verdict"] == "problem" and "gemma3.py is unpatched" in vllm["detail"] and "apply" in vllm["fix"]
    run_fix(vllm["fix"])
    after = doctor(package_dir, drafter, target)
    assert after["consistent"] and after["captured"] == [2, 13, 23], after
    assert "the patched default" in finding(after, "layers")["detail"]


def test_a_model_the_rule_cannot_follow_is_a_problem_apply_cannot_fix(release, checkpoints):
    ouro = {**GEMMA3_TEXT, "architectures": ["OuroForCausalLM"], "model_type": "ouro"}  # runs its layers once per step
    drafter, target = checkpoints(LLAMA_DRAFTER, ouro)
    vllm = finding(doctor(release("0.17.1"), drafter, target), "vLLM")
    assert vllm["verdict"] == "problem" and "in OuroModel.forward, found none" in vllm["detail"], vllm
    assert "apply" not in vllm["fix"]


def test_a_native_target_is_judged_by_its_own_class_its_ids_and_the_gate(release, checkpoints):
    """Llama's class implements EAGLE-3 and 0.17.1's gate admits it: consistent, with the ids llama.py's getter
    returns.  Mistral's class is the same, but the gate refuses ``mistral``: a problem that ``apply``, the fix
    named, solves.  Neither speaks of DeepSeek."""
    package_dir = release("0.17.1")
    llama = {**GEMMA3_TEXT, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    drafter, target = checkpoints(LLAMA_DRAFTER, llama)
    report = doctor(package_dir, drafter, target)
    assert report["consistent"] and report["captured"] == [2, 13, 23], report
    assert "llama.py's LlamaForCausalLM.get_eagle3_aux_hidden_state_layers" in finding(report, "layers")["detail"]
    drafter, target = checkpoints(
        LLAMA_DRAFTER, {**llama, "architectures": ["MistralForCausalLM"], "model_type": "mistral"}
    )
    report = doctor(package_dir, drafter, target)
    vllm = finding(report, "vLLM")
    assert not report["consistent"] and vllm["verdict"] == "problem" and "'mistral'" in vllm["detail"], vllm
    assert report["captured"] == [2, 13, 23] and "DeepSeek" not in json.dumps(report)
    run_fix(vllm["fix"])
    assert doctor(package_dir, drafter, target)["consistent"]


@pytest.mark.parametrize(
    ("version", "architecture", "model_type", "verdict", "says"),
    [
        pytest.param("0.17.1", "MixtralForCausalLM", "mixtral", "note", "one pipeline stage only", id="0.17.1"),
        pytest.param(
            "0.33.0",
            "MixtralForCausalLM",
            "mixtral",
            "ok",
            "carries its aux states across pipeline ranks",
            id="patched",
        ),
        pytest.param("0.33.0", "LlamaForCausalLM", "llama", "ok", "carries its aux states across", id="native"),
        pytest.param("0.33.0", "DbrxForCausalLM", "dbrx", "note", "does not carry aux states across", id="no-config"),
    ],
)
def test_pipeline_parallelism_is_judged_by_release_and_target(
    release, checkpoints, version, architecture, model_type, verdict, says
):
    """Before 0.30.0 vLLM runs EAGLE-3 on one stage; from 0.30.0 it depends on the target's decoder: native
    ones that opted in, and those this tool makes carry their aux states (after apply), run over ranks."""
    package_dir = release(version)
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    target = {**GEMMA3_TEXT, "architectures": [architecture], "model_type": model_type}
    drafter, target_dir = checkpoints(LLAMA_DRAFTER, target)
    found = finding(doctor(package_dir, drafter, target_dir), "pipeline")
    assert found["verdict"] == verdict and says in found["detail"], found


MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 7168,
    "num_hidden_layers": 32,
    "vocab_size": 129280,
}
SPECFORGE_MIXTRAL = {**LLAMA_DRAFTER, "eagle_config": {FIELD: [1, 15, 28]}}  # SGLang's default for 32 layers


@pytest.mark.parametrize(
    ("version", "captured", "runner"),
    [
        # V1 serves Mixtral by default and reads nested ids as its own (0.22.0 - 0.33.0): one layer off
        pytest.param("0.24.0", [1, 15, 28], "model runner V1 (the default on a GPU) reads eagle_config", id="v1"),
        # V2 serves every model by default and reads no nested eagle_aux_hidden_state_layer_ids: the target's getter
        pytest.param("0.33.0", [2, 16, 29], "model runner V2 (the default on a GPU) ignores them", id="v2"),
    ],
)
def test_the_runner_a_gpu_user_gets_decides_which_drafter_ids_are_read(release, checkpoints, version, captured, runner):
    """Issue 39.2: the drafter-id fields are read from each runner's own code, and the runner a GPU user gets for
    the target decides; the fix (top-level ids, which every runner reads first, as they are) makes it consistent."""
    package_dir = release(version)
    drafter, target = checkpoints(SPECFORGE_MIXTRAL, MIXTRAL)
    assert run_cli("--vllm-dir", str(package_dir), "apply").returncode == 0
    report = doctor(package_dir, drafter, target)
    assert runner in finding(report, "ids")["detail"]
    assert report["captured"] == captured and report["expected"] == [2, 16, 29]
    layers = finding(report, "layers")
    if captured == report["expected"]:
        assert layers["verdict"] == "ok" and report["consistent"] is True
        return
    assert layers["verdict"] == "problem" and report["consistent"] is False
    run_fix(layers["fix"])
    fixed = doctor(package_dir, drafter, target)
    assert fixed["captured"] == [2, 16, 29] and fixed["consistent"] is True


def test_aux_layers_from_is_refused_where_a_runner_reads_other_ids_from_the_drafter(release, checkpoints):
    """Issue 39.2: ``apply --aux-layers-from`` writes the getter, which 0.24.0's V1 never asks for a drafter with
    nested ids (it reads them as its own): refused in one line, nothing written; 0.17.1's runners read no nested
    ids, so there the getter is what counts and apply writes the drafter's ids in vLLM's convention."""
    drafter, _ = checkpoints(SPECFORGE_MIXTRAL, MIXTRAL)
    newer = release("0.24.0")
    before = tree_digest(newer.parent)
    refused = run_cli("--vllm-dir", str(newer), "apply", "--aux-layers-from", str(drafter))
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "reads the drafter's eagle_config.eagle_aux_hidden_state_layer_ids [1, 15, 28] itself" in refused.stderr
    assert tree_digest(newer.parent) == before
    older = release("0.17.1")
    assert run_cli("--vllm-dir", str(older), "apply", "--aux-layers-from", str(drafter)).returncode == 0
    assert json.loads(run_cli("--vllm-dir", str(older), "--json", "status").stdout)["aux_layers"] == [2, 16, 29]


# --------------------------------------------------------------------------- other methods' drafters

QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "vocab_size": 151936,
}
DFLASH_DRAFTER = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 1,
    "vocab_size": 151936,
    "dflash_config": {"target_layer_ids": [1, 17, 33], "mask_token_id": 151669},
}


def test_a_dflash_drafter_one_layer_early_on_0_21_0_is_caught_and_its_fix_works(release, checkpoints):
    """0.20.0-0.21.0's runner reads dflash_config.target_layer_ids without the +1 it applies from 0.22.0."""
    package_dir = release("0.21.0")
    drafter, target = checkpoints(DFLASH_DRAFTER, QWEN3)
    report = doctor(package_dir, drafter, target)
    assert (
        finding(report, "architecture")["verdict"] == "ok"
        and "dflash drafter" in finding(report, "architecture")["detail"]
    )
    assert report["expected"] == [2, 18, 34] and report["captured"] == [1, 17, 33]
    layers = finding(report, "layers")
    assert layers["verdict"] == "problem" and layers["fix"].startswith("python3 -c")
    run_fix(layers["fix"])
    fixed = doctor(package_dir, drafter, target)
    assert fixed["consistent"] is True and fixed["captured"] == [2, 18, 34], fixed


@pytest.mark.parametrize("version", ["0.24.0", "0.29.0"])
def test_a_dflash_drafter_is_consistent_where_both_runners_add_the_1(release, checkpoints, version):
    drafter, target = checkpoints(DFLASH_DRAFTER, QWEN3)
    report = doctor(release(version), drafter, target)
    assert report["consistent"] is True and report["captured"] == report["expected"] == [2, 18, 34], report
    assert "dflash_config.target_layer_ids [1, 17, 33], +1 each: layers [2, 18, 34]" in finding(report, "ids")["detail"]


def test_a_dflash_drafter_on_a_release_without_dflash_says_which_has_it(release, checkpoints):
    drafter, target = checkpoints(DFLASH_DRAFTER, QWEN3)
    report = doctor(release("0.17.1"), drafter, target)
    architecture = finding(report, "architecture")
    assert architecture["verdict"] == "problem" and "has no dflash (from 0.20.0)" in architecture["detail"]
    assert architecture["fix"].startswith("pip install 'vllm>=0.20.0'")


def test_a_dspark_drafter_is_read_with_its_own_field(release, checkpoints):
    dspark = {**DFLASH_DRAFTER, "architectures": ["Qwen3DSparkModel"], "dspark_target_layer_ids": [1, 17, 33]}
    del dspark["dflash_config"]
    drafter, target = checkpoints(dspark, QWEN3)
    report = doctor(release("0.29.0"), drafter, target)
    assert report["consistent"] is True and report["captured"] == report["expected"] == [2, 18, 34], report


def test_doctor_target_alone_says_what_extract_hidden_states_saves(release, checkpoints):
    package_dir = release("0.17.1")
    _, target = checkpoints(LLAMA_DRAFTER, QWEN3)
    base = ["--vllm-dir", str(package_dir), "doctor", "--target", str(target)]
    report = json.loads(run_cli(*base, "--json").stdout)
    assert report["drafter"] is None and report["captured"] == [2, 18, 33] and report["consistent"], report
    assert "18 = the stream entering layer 18 (transformers' hidden_states[18])" in finding(report, "layers")["detail"]
    completed = run_cli(*base, "--layers", "0,18,36", "--json")
    report = json.loads(completed.stdout)
    layers = finding(report, "layers")
    assert completed.returncode == 1 and layers["verdict"] == "problem", report  # Qwen3's decoder: vLLM's own
    assert "not layer 0" in layers["detail"] and "36 = the stream leaving the last layer" in layers["detail"]
    assert run_cli(*base, "--layers", "1,18,35").returncode == 0
    completed = run_cli(*base, "--layers", "1,18,36", "--json")  # Qwen3's decoder never reaches its last layer's output
    layers = finding(json.loads(completed.stdout), "layers")
    assert completed.returncode == 1 and "but not layer 36: vLLM's decoder captures each id before" in layers["detail"]
    assert run_cli("doctor", "--layers", "1,2").returncode == 2  # neither a drafter nor a target
