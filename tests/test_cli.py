"""The commands' contracts on real releases: diffs that reproduce apply, exit codes, refusals."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from helpers.bytes_on_disk import record_mismatches, tree_digest
from helpers.cli import run_cli
from helpers.lifting import lift_method

DEEPSEEK = "model_executor/models/deepseek_v2.py"
GATE = "config/speculative.py"
PROPOSER = "v1/spec_decode/eagle.py"


def cli(package_dir, *args, **kwargs):
    return run_cli("--vllm-dir", str(package_dir), *args, **kwargs)


def test_diff_reproduces_apply_with_patch_and_git_apply(release, tmp_path):
    by_apply = release("0.11.0")
    by_patch = release("0.11.0")
    by_git = release("0.11.0")
    diff = cli(by_apply, "diff")
    assert diff.returncode == 0
    assert f"--- a/vllm/{DEEPSEEK}\n+++ b/vllm/{DEEPSEEK}\n" in diff.stdout
    assert f"--- a/vllm/{GATE}\n" in diff.stdout
    assert cli(by_apply, "apply").returncode == 0

    patch_file = tmp_path / "eagle3.patch"
    patch_file.write_text(diff.stdout)
    subprocess.run(["patch", "-p1", "-i", str(patch_file)], cwd=by_patch.parent, check=True, capture_output=True)
    subprocess.run(["git", "apply", "-p1", str(patch_file)], cwd=by_git.parent, check=True, capture_output=True)
    for path in (DEEPSEEK, GATE):
        expected = (by_apply / path).read_bytes()
        assert (by_patch / path).read_bytes() == expected
        assert (by_git / path).read_bytes() == expected


def test_diff_by_patch_is_patched_but_not_revertible(release, tmp_path):
    package_dir = release("0.17.1")
    (tmp_path / "p").write_text(cli(package_dir, "diff").stdout)
    subprocess.run(["patch", "-p1", "-i", str(tmp_path / "p")], cwd=package_dir.parent, check=True, capture_output=True)
    report = json.loads(cli(package_dir, "status", "--json").stdout)
    assert report["state"] == "patched"
    assert "no manifest" in report["targets"][0]["reason"]
    assert cli(package_dir, "revert").stdout.startswith("nothing to revert")


def test_piped_output_has_no_escape_codes(release):
    package_dir = release("0.17.1")
    for args in (["status"], ["diff"], ["apply", "--dry-run"]):
        completed = cli(package_dir, *args)
        assert completed.returncode == 0
        assert "\x1b[" not in completed.stdout


def test_status_json_schema(release):
    report = json.loads(cli(release("0.11.0"), "status", "--json").stdout)
    assert set(report) >= {"vllm_dir", "vllm_version", "distribution", "record", "state", "reason", "targets"}
    assert (report["distribution"], Path(report["record"]).name) == ("vllm", "RECORD")
    families = [
        f"model_executor/models/{name}.py"
        for name in ("bailing_moe", "gemma3", "gemma3_mm", "glm4_moe", "longcat_flash", "qwen3_next")
    ]
    files = {t["file"] for t in report["targets"]}
    assert files >= {DEEPSEEK, GATE, PROPOSER, *families}  # the proposer: every multimodal target's image token
    found = files - {DEEPSEEK, GATE, PROPOSER, *families}  # the model files of the families found by rule
    assert "model_executor/models/mixtral.py" in found and all(f.startswith("model_executor/models/") for f in found)
    assert all(set(t) == {"file", "state", "reason", "original"} for t in report["targets"])
    assert {t["original"] for t in report["targets"]} == {"matches-record"}


def test_dry_run_writes_nothing(release):
    package_dir = release("0.11.0")
    untouched = tree_digest(package_dir.parent)
    completed = cli(package_dir, "apply", "--dry-run")
    assert completed.returncode == 0
    assert f"would patch          {DEEPSEEK}" in completed.stdout
    assert tree_digest(package_dir.parent) == untouched


def test_revert_refuses_a_file_edited_after_apply_and_force_restores(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    with open(package_dir / DEEPSEEK, "a") as edited:
        edited.write("# a hand edit\n")
    assert json.loads(cli(package_dir, "status", "--json").stdout)["state"] == "modified"
    edited_tree = tree_digest(package_dir.parent)

    refused = cli(package_dir, "revert")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and DEEPSEEK in refused.stderr
    assert tree_digest(package_dir.parent) == edited_tree
    assert cli(package_dir, "apply").returncode == 1

    forced = cli(package_dir, "revert", "--force")  # the hand edit is gone: revert names the file
    assert forced.returncode == 0 and f"the changes made since apply to {DEEPSEEK} are gone" in forced.stdout
    assert record_mismatches(package_dir) == []


def test_revert_leaves_a_file_reinstalled_since_apply_as_the_installer_wrote_it(release):
    """An original taken with --accept-modified, then the wheel's file put back by hand: revert, with or
    without --force, never writes the edited original over RECORD's bytes, and says why."""
    package_dir = release("0.17.1")
    wheel_bytes = (package_dir / DEEPSEEK).read_bytes()
    for force in ((), ("--force",)):
        (package_dir / DEEPSEEK).write_bytes(wheel_bytes + b"# a hand edit\n")
        assert cli(package_dir, "apply", "--accept-modified").returncode == 0
        (package_dir / DEEPSEEK).write_bytes(wheel_bytes)  # pip install --force-reinstall, for one file
        reverted = cli(package_dir, "revert", *force)
        assert reverted.returncode == 0, reverted.stderr
        assert f"left {DEEPSEEK} as it is: it holds the installed vLLM's bytes (RECORD) again" in reverted.stdout
        assert "edited before apply" not in reverted.stdout
        assert record_mismatches(package_dir) == []


def test_nothing_to_revert(release):
    completed = cli(release("0.17.1"), "revert")
    assert completed.returncode == 0 and "nothing to revert" in completed.stdout


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: "{ not json",
        lambda m: json.dumps({**json.loads(m), "files": {"../../outside.py": json.loads(m)["files"][DEEPSEEK]}}),
        lambda m: json.dumps({**json.loads(m), "files": {"/etc/passwd": json.loads(m)["files"][DEEPSEEK]}}),
        lambda m: m[: len(m) // 2],
    ],
)
def test_damaged_manifest_is_refused_and_nothing_changes(release, damage):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    manifest = package_dir / ".vllm-eagle3-patch" / "manifest.json"
    manifest.write_text(damage(manifest.read_text()))
    before = tree_digest(package_dir.parent)
    for command in ("revert", "apply", "status"):
        completed = cli(package_dir, command)
        assert completed.returncode == 1, command
        assert completed.stderr.count("\n") == 1 and "manifest" in completed.stderr
    assert tree_digest(package_dir.parent) == before


def test_a_source_the_codemod_cannot_follow_is_refused_and_no_file_is_written(release):
    package_dir = release("0.11.0")
    source = (package_dir / DEEPSEEK).read_text()
    loop = "for layer in islice(self.layers, self.start_layer, self.end_layer):"
    assert loop in source
    (package_dir / DEEPSEEK).write_text(source.replace(loop, "for layer in self.layers:"))
    untouched = tree_digest(package_dir.parent)
    report = json.loads(cli(package_dir, "status", "--json").stdout)
    assert report["state"] == "unsupported" and "a loop over self.layers" in report["reason"]
    completed = cli(package_dir, "apply")
    assert completed.returncode == 1
    assert completed.stderr.count("\n") == 1 and DEEPSEEK in completed.stderr
    assert tree_digest(package_dir.parent) == untouched  # the gate, patchable on its own, was not written


def test_a_renamed_class_is_refused(release):
    package_dir = release("0.17.1")
    path = package_dir / DEEPSEEK
    path.write_text(path.read_text().replace("class DeepseekV2ForCausalLM(", "class DeepseekV2LM("))
    completed = cli(package_dir, "apply")
    assert completed.returncode == 1 and "class DeepseekV2ForCausalLM" in completed.stderr


NO_LINKS = (
    "import os, runpy\n"
    "def refused(*args, **kwargs):\n"
    "    raise OSError(18, 'Invalid cross-device link')\n"
    "os.link = refused\n"
    "runpy.run_module('vllm_eagle3_patch', run_name='__main__')\n"
)
"""The tool's command line where no hard link can be made (the backups are then copies, written)."""


@pytest.mark.parametrize(
    "room, links",
    [(100, True), (-1, True), (-1, False)],
    ids=[
        "a-patched-file-does-not-fit",
        "a-linked-backup-and-a-patched-file-do-not-fit",
        "a-copied-backup-does-not-fit",
    ],
)
def test_a_failing_write_changes_nothing(release, room, links):
    """A real write error (file-size limit) part-way through apply: exit 1, one line naming the file, no trace left.
    The limit is the largest file apply changes plus ``room``: its backup fits and its patched text does not, or
    (``-1``) its backup would not fit either: a backup is a second name of the file, no byte written, except
    where no link can be made, and then its copy fails first.  Every new text is written beside its file before
    any is renamed into place, so no failure has changed a file of vLLM."""
    package_dir = release("0.11.0")
    untouched = tree_digest(package_dir.parent)
    targets = json.loads(cli(package_dir, "status", "--json").stdout)["targets"]
    largest = max((package_dir / t["file"]).stat().st_size for t in targets if t["state"] == "unpatched")
    limit = largest + room

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    tool = ["-m", "vllm_eagle3_patch"] if links else ["-c", NO_LINKS]
    completed = subprocess.run(
        [sys.executable, *tool, "--vllm-dir", str(package_dir), "apply"],
        capture_output=True,
        text=True,
        preexec_fn=small_files,
    )
    assert completed.returncode == 1
    said = completed.stderr
    assert said.count("\n") == 1 and "nothing was changed" in said and ".py: cannot write" in said, said
    failed_on_a_backup = "/.vllm-eagle3-patch/backups/" in said
    assert failed_on_a_backup == (not links), said
    assert tree_digest(package_dir.parent) == untouched


def test_a_failing_state_write_leaves_no_bytecode_it_kept(release, monkeypatch):
    """A second ``apply`` (a manifest is there) keeps the installer's bytecode of the files it adds, then cannot
    write its manifest: the bytecode it kept goes with its backups, and the state is the first run's."""
    from vllm_eagle3_patch import changes
    from vllm_eagle3_patch.codemod.patch import Options
    from vllm_eagle3_patch.errors import ToolError
    from vllm_eagle3_patch.install.locate import from_package_dir
    from vllm_eagle3_patch.install.manifest import StateDir

    package_dir = release("0.11.0")
    assert cli(package_dir, "apply", "-q", "--only", "MixtralForCausalLM").returncode == 0
    compiled = [sys.executable, "-m", "compileall", "-q", str(package_dir / "model_executor" / "models")]
    subprocess.run(compiled, check=True, stdout=subprocess.DEVNULL)
    untouched = tree_digest(package_dir.parent)
    real_save, failed = StateDir.save, []

    def fail_once(state_dir, manifest):
        if not failed:
            failed.append(manifest)
            raise OSError(28, "No space left on device", str(state_dir.manifest_path))
        real_save(state_dir, manifest)

    monkeypatch.setattr(StateDir, "save", fail_once)
    with pytest.raises(ToolError, match=r"manifest\.json: cannot write .No space left on device.; nothing was changed"):
        changes.apply(from_package_dir(package_dir), Options())
    assert failed and tree_digest(package_dir.parent) == untouched  # no bytecode kept by the failed run


def test_a_failure_on_the_second_file_restores_the_first(release, monkeypatch):
    """A rename that fails after others succeeded (the new texts all written beside their files): the files already
    renamed get their old bytes back, the rest are discarded, and nothing of the run is left."""
    from vllm_eagle3_patch import changes
    from vllm_eagle3_patch.codemod.patch import Options
    from vllm_eagle3_patch.errors import ToolError
    from vllm_eagle3_patch.install.fileio import Staged
    from vllm_eagle3_patch.install.locate import from_package_dir
    from vllm_eagle3_patch.install.manifest import STATE_DIR

    package_dir = release("0.11.0")
    untouched = tree_digest(package_dir.parent)
    real_commit = Staged.commit
    renamed, failed = [], []

    def of_vllm(path: Path) -> bool:  # not the tool's state, not its cache in the user's directory
        return package_dir in path.parents and STATE_DIR not in path.parts

    def fail_on_the_second_file_of_vllm(staged):
        if of_vllm(staged.path) and len(renamed) == 1 and not failed:
            failed.append(staged.path)
            raise OSError(28, "No space left on device")
        real_commit(staged)
        if of_vllm(staged.path):
            renamed.append(staged.path)

    monkeypatch.setattr(Staged, "commit", fail_on_the_second_file_of_vllm)
    with pytest.raises(ToolError, match=r"\.py: cannot write .No space left on device.; every file was rolled back"):
        changes.apply(from_package_dir(package_dir), Options())
    assert len(failed) == 1 and renamed == [renamed[0], renamed[0]]  # renamed, then put back
    assert tree_digest(package_dir.parent) == untouched


def test_a_file_renamed_whose_bytecode_cannot_be_dropped_is_rolled_back_too(release, monkeypatch):
    """The rename succeeded, removing the file's old bytecode failed: the file counts as written, and is put back
    with every other."""
    from vllm_eagle3_patch import changes
    from vllm_eagle3_patch.codemod.patch import Options
    from vllm_eagle3_patch.errors import ToolError
    from vllm_eagle3_patch.install.locate import from_package_dir

    package_dir = release("0.11.0")
    untouched = tree_digest(package_dir.parent)
    real_drop, failed = changes.drop_bytecode, []

    def fail_once(source):
        if not failed:
            failed.append(source)
            raise OSError(13, "Permission denied", str(source.parent / "__pycache__"))
        real_drop(source)

    monkeypatch.setattr(changes, "drop_bytecode", fail_once)
    with pytest.raises(ToolError, match="cannot write .Permission denied.; every file was rolled back"):
        changes.apply(from_package_dir(package_dir), Options())
    assert len(failed) == 1 and tree_digest(package_dir.parent) == untouched


def assert_getter_returns(package_dir: Path, ids: tuple[int, ...]) -> None:
    """Run the patched getters (model and, where there is one, the Kimi-K2.5 wrapper)."""
    from types import SimpleNamespace

    getter = lift_method(
        (package_dir / DEEPSEEK).read_text(), "DeepseekV2ForCausalLM", "get_eagle3_aux_hidden_state_layers", {}
    )
    assert getter(SimpleNamespace(model=SimpleNamespace(layers=[None] * 61))) == ids
    with pytest.raises(ValueError, match=r"must lie in 0\.\.20 \(this model has 20 decoder layers\)"):
        getter(SimpleNamespace(model=SimpleNamespace(layers=[None] * 20)))


def test_aux_layers_on_the_kimi_wrapper_of_0_15(release):
    """0.15.x's wrapper holds a bare DeepseekV2Model: its own getter must return the ids."""
    from types import SimpleNamespace

    package_dir = release("0.15.0")
    assert cli(package_dir, "apply", "--aux-layers", "1,29,57").returncode == 0
    source = (package_dir / "model_executor/models/kimi_k25.py").read_text()
    getter = lift_method(source, "KimiK25ForConditionalGeneration", "get_eagle3_aux_hidden_state_layers", {})
    assert getter(SimpleNamespace(language_model=SimpleNamespace(layers=[None] * 61))) == (1, 29, 57)
    setter = lift_method(source, "KimiK25ForConditionalGeneration", "set_aux_hidden_state_layers", {})
    wrapper = SimpleNamespace(language_model=SimpleNamespace(aux_hidden_state_layers=(), start_layer=0))
    setter(wrapper, (3, 4))
    assert wrapper.language_model.aux_hidden_state_layers == (3, 4)


def test_aux_layers_are_written_shown_updated_and_reverted(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply", "--aux-layers", "1,29,57").returncode == 0
    assert json.loads(cli(package_dir, "status", "--json").stdout)["aux_layers"] == [1, 29, 57]
    assert_getter_returns(package_dir, (1, 29, 57))

    diff = cli(package_dir, "apply", "--dry-run", "--aux-layers", "2,30,58")
    assert f"would patch          {DEEPSEEK}" in diff.stdout
    assert cli(package_dir, "apply").stdout.startswith("vLLM 0.17.1 is already patched")  # keeps 1,29,57
    assert cli(package_dir, "apply", "--aux-layers", "2,30,58").returncode == 0
    assert_getter_returns(package_dir, (2, 30, 58))
    assert json.loads(cli(package_dir, "status", "--json").stdout)["aux_layers"] == [2, 30, 58]

    assert cli(package_dir, "revert").returncode == 0
    assert record_mismatches(package_dir) == []


@pytest.mark.parametrize("ids", ["1,x", "-1,2", "3,3", ""])
def test_bad_aux_layers_are_a_usage_error(release, ids):
    package_dir = release("0.17.1")
    completed = cli(package_dir, "apply", "--aux-layers", ids)
    assert completed.returncode == 2
    assert not (package_dir / ".vllm-eagle3-patch").exists()


def test_usage_errors_exit_2():
    assert run_cli().returncode == 2
    assert run_cli("frobnicate").returncode == 2
    assert run_cli("--vllm-dir", "a", "--python", "b", "status").returncode == 2


def test_help_everywhere():
    for command in ([], ["status"], ["diff"], ["apply"], ["revert"], ["doctor"]):
        completed = run_cli(*command, "--help")
        assert completed.returncode == 0 and "usage:" in completed.stdout


def test_not_a_vllm_directory(tmp_path):
    completed = run_cli("--vllm-dir", str(tmp_path), "status")
    assert completed.returncode == 1
    assert (
        completed.stderr
        == f"vllm-eagle3-patch: error: {tmp_path}: not a vllm package directory (expected {tmp_path / '__init__.py'})\n"
    )


def test_python_option_finds_the_vllm_of_another_environment(venv_with_vllm):
    python = venv_with_vllm / "bin" / "python"
    report = json.loads(run_cli("--python", str(python), "status", "--json").stdout)
    assert report["vllm_version"] == "0.17.1"
    assert report["vllm_dir"].startswith(str(venv_with_vllm))
    assert report["state"] == "unpatched"
    assert run_cli("--python", str(python), "apply").returncode == 0
    assert json.loads(run_cli("--python", str(python), "status", "--json").stdout)["state"] == "patched"
    assert run_cli("--python", str(python), "revert").returncode == 0
    assert record_mismatches(Path(report["vllm_dir"])) == []


def test_python_option_without_vllm(tmp_path):
    home = tmp_path / "empty"
    venv.create(home, with_pip=False)
    completed = run_cli("--python", str(home / "bin" / "python"), "status")
    assert completed.returncode == 1
    assert "no vllm package found on the sys.path of" in completed.stderr
    assert completed.stderr.count("\n") == 1


def test_python_option_with_a_missing_interpreter(tmp_path):
    completed = run_cli("--python", str(tmp_path / "nope"), "status")
    assert completed.returncode == 1 and "expected a Python interpreter" in completed.stderr


@pytest.mark.parametrize(
    ("config", "convention", "written"),
    [
        (
            {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [3, 31, 59]},
            "vllm",
            [3, 31, 59],
        ),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}, "sglang", [2, 30, 58]),
    ],
)
def test_aux_layers_from_a_drafter_checkpoint(release, tmp_path, config, convention, written):
    """The convention used and the vLLM ids written are printed; SpecForge's DeepSeek-V3 ids
    (vLLM's default minus one) are written one higher."""
    package_dir = release("0.17.1")
    (tmp_path / "config.json").write_text(json.dumps(config))
    completed = cli(package_dir, "apply", "--aux-layers-from", str(tmp_path))
    assert completed.returncode == 0
    assert f"taken as {convention} ids" in completed.stdout
    assert f"vLLM ids: {', '.join(map(str, written))}" in completed.stdout
    assert json.loads(cli(package_dir, "status", "--json").stdout)["aux_layers"] == written


def test_aux_layers_from_top_level_sglang_ids_is_refused_where_the_runner_reads_them(release, tmp_path):
    """0.17.1's runner reads a drafter's top-level ids as its own (from 0.11.1): SGLang's [1, 29, 57] there reach it
    one layer early whatever the getter says, so writing [2, 30, 58] into the getter would change nothing it uses;
    apply refuses in one line, writes nothing, and points at the drafter's config."""
    package_dir = release("0.17.1")
    (tmp_path / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}))
    untouched = tree_digest(package_dir.parent)
    refused = cli(package_dir, "apply", "--aux-layers-from", str(tmp_path))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "reads the drafter's eagle_aux_hidden_state_layer_ids [1, 29, 57] itself" in refused.stderr
    assert tree_digest(package_dir.parent) == untouched


def test_aux_layers_from_ambiguous_ids_need_a_convention(release, tmp_path):
    """Ids nested under eagle_config that match no pattern: refused, nothing written, until chosen."""
    package_dir = release("0.17.1")
    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}})
    )
    untouched = tree_digest(package_dir.parent)
    refused = cli(package_dir, "apply", "--aux-layers-from", str(tmp_path))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert str(tmp_path / "config.json") in refused.stderr and "--ids-convention" in refused.stderr
    assert tree_digest(package_dir.parent) == untouched
    assert cli(package_dir, "apply", "--aux-layers-from", str(tmp_path), "--ids-convention", "sglang").returncode == 0
    assert json.loads(cli(package_dir, "status", "--json").stdout)["aux_layers"] == [3, 31, 59]


def test_ids_convention_without_a_drafter_is_a_usage_error(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply", "--ids-convention", "vllm").returncode == 2
    assert not (package_dir / ".vllm-eagle3-patch").exists()


@pytest.mark.parametrize(("version", "reads"), [("0.11.0", False), ("0.11.1", True)])
def test_status_names_the_drafters_ids_only_where_the_release_reads_them(release, version, reads):
    completed = cli(release(version), "status")
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("aux layer ids:")]
    assert ("unless the drafter's config has top-level ids" in line) is reads
    assert ("ignores a drafter's ids" in line) is not reads


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"hidden_size": 7168}', "no eagle_aux_hidden_state_layer_ids"),
        ('{"eagle_aux_hidden_state_layer_ids": [1, 1]}', "repeated"),
        ('{"eagle_aux_hidden_state_layer_ids": [1, -2]}', "negative"),
        ('{"eagle_aux_hidden_state_layer_ids": "1,2"}', "list of layer ids"),
        ("{oops", "not valid JSON"),
    ],
)
def test_bad_drafter_configs_are_refused(release, tmp_path, content, message):
    package_dir = release("0.17.1")
    config = tmp_path / "drafter.json"
    config.write_text(content)
    completed = cli(package_dir, "apply", "--aux-layers-from", str(config))
    assert completed.returncode == 1
    assert completed.stderr.count("\n") == 1 and str(config) in completed.stderr and message in completed.stderr
    assert not (package_dir / ".vllm-eagle3-patch").exists()


def test_verify_fails_unpatched_and_passes_patched_through_python(serving_venv):
    python = str(serving_venv)
    unpatched = run_cli("--python", python, "verify", "--json")
    assert unpatched.returncode == 1
    report = json.loads(unpatched.stdout)
    assert report["imported"] is True and report["verified"] is False
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    for causal_lm, model in FAMILY_CLASSES:
        states = f"{model}.forward hands the drafter the stream as it was"
        assert {f"{causal_lm} supports EAGLE-3", states} <= failed, failed
    assert "Gemma3ForConditionalGeneration supports EAGLE-3 and delegates" in failed

    assert run_cli("--python", python, "apply", "-q").returncode == 0
    try:
        patched = run_cli("--python", python, "verify")
        assert patched.returncode == 0, patched.stdout + patched.stderr
        assert "verdict: PASS\n" in patched.stdout and "FAIL" not in patched.stdout
        assert "\x1b[" not in patched.stdout
    finally:
        assert run_cli("--python", python, "revert", "-q").returncode == 0


FAMILY_CLASSES = (
    ("DeepseekV2ForCausalLM", "DeepseekV2Model"),
    ("Glm4MoeForCausalLM", "Glm4MoeModel"),
    ("Gemma3ForCausalLM", "Gemma3Model"),
    ("BailingMoeForCausalLM", "BailingMoeModel"),
    ("MiniMaxM2ForCausalLM", "MiniMaxM2Model"),
    ("LongcatFlashForCausalLM", "FlashModel"),
    ("Qwen3NextForCausalLM", "Qwen3NextModel"),
)
"""Every family 0.17.1 has: verify runs the same checks on each (and on Qwen3.5 where torchvision
imports: tests/engine/test_verify_engine.py)."""


def test_verify_checks_the_families_apply_patches_and_not_those_it_leaves_alone(release, cpu_python):
    package_dir = release("0.17.1")
    gemma3 = package_dir / "model_executor/models/gemma3.py"
    gemma3.write_text(
        gemma3.read_text().replace(
            "for layer in islice(self.layers, self.start_layer, self.end_layer):", "for layer in self.layers:"
        )
    )
    assert cli(package_dir, "apply", "-q").returncode == 0
    verified = cli(package_dir, "verify", "--interpreter", str(cpu_python), "--json")
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["verified"] is True, [c for c in report["checks"] if not c["ok"]]
    names = {c["name"] for c in report["checks"]}
    for causal_lm, model in FAMILY_CLASSES:
        checked = {
            f"{causal_lm} supports EAGLE-3",
            f"{model}.forward hands the drafter the stream as it was",
            f"{model}.forward unchanged with no ids",
        }
        assert checked.isdisjoint(names) if model == "Gemma3Model" else checked <= names, (model, names)
    assert not any("Gemma3ForConditionalGeneration" in name for name in names)
    (qwen3_5,) = [c for c in report["checks"] if c["name"] == "Qwen3_5Model (not importable here)"]
    assert qwen3_5["ok"] and "torchvision" in qwen3_5["detail"], qwen3_5  # checked in the engine interpreter


def test_verify_without_torch_falls_back_to_static_checks(venv_with_vllm):
    python = str(venv_with_vllm / "bin" / "python")
    completed = run_cli("--python", python, "verify")
    assert completed.returncode == 1
    assert "static checks only: torch/vLLM cannot be imported there" in completed.stdout
    assert run_cli("--python", python, "apply", "-q").returncode == 0
    try:
        static_pass = run_cli("--python", python, "verify", "--json")
        assert static_pass.returncode == 3  # the patched code never ran: not a pass for a CI gate
        report = json.loads(static_pass.stdout)
        assert report["imported"] is False and report["verified"] is True and "torch" in report["import_error"]
        assert run_cli("--python", python, "verify", "--static", "-q").returncode == 0
    finally:
        assert run_cli("--python", python, "revert", "-q").returncode == 0


def test_status_check_exit_codes(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "status", "--check", "-q").returncode == 1
    assert cli(package_dir, "apply", "-q").stdout == ""
    checked = cli(package_dir, "status", "--check", "-q")
    assert checked.returncode == 0 and checked.stdout == ""
    newer = release("0.18.0")  # DeepSeek native there, the other families' files not: unpatched, then patched
    assert cli(newer, "status", "--check", "-q").returncode == 1
    assert cli(newer, "apply", "-q").returncode == 0
    assert cli(newer, "status", "--check", "-q").returncode == 0


def test_every_command_speaks_json(release):
    """One JSON object on stdout for each command; nothing else there."""
    package_dir = release("0.17.1")
    status_keys = {"vllm_dir", "vllm_version", "distribution", "record", "state", "reason", "aux_layers", "targets"}
    outcome_keys = {"message", "files", "vllm_dir", "originals"}
    applied_keys = outcome_keys | {"aux_layers", "aux_layers_source"}  # the ids apply wrote, and why those
    expected = [
        (["status", "--json"], status_keys),
        (["diff", "--json"], status_keys | {"diff"}),
        (["apply", "--dry-run", "--json"], status_keys | {"would_change"}),
        (["apply", "--json"], applied_keys),
        (["apply", "--json"], applied_keys),
        (["revert", "--json"], outcome_keys),
        (["revert", "--json"], outcome_keys),
    ]
    for args, keys in expected:
        completed = cli(package_dir, *args)
        assert completed.returncode == 0, (args, completed.stderr)
        assert set(json.loads(completed.stdout)) == keys, args
    refused = cli(release("0.8.4"), "apply", "--json")  # an error is one object too, the message on stderr
    assert refused.returncode == 1 and refused.stderr.startswith("vllm-eagle3-patch: error: ")
    assert json.loads(refused.stdout) == {"error": refused.stderr.split("error: ", 1)[1].strip(), "exit_code": 1}


def test_colour_on_a_terminal_and_never_with_no_color(release):
    """``script`` gives the command a real pseudo-terminal."""
    package_dir = release("0.17.1")
    command = f"{sys.executable} -m vllm_eagle3_patch --vllm-dir {package_dir}"

    def on_terminal(args: str, **env: str) -> str:
        completed = subprocess.run(
            ["script", "-qec", f"{command} {args}", "/dev/null"],
            capture_output=True,
            text=True,
            env={**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "TERM": "xterm-256color", **env},
        )
        assert completed.returncode == 0, completed.stdout
        return completed.stdout

    status = on_terminal("status")
    assert "\x1b[" in status and "\x1b[" in on_terminal("diff")
    # rich's automatic highlighter would colour the digits inside these words: it is off
    assert "EAGLE-3 for DeepSeek-V2/V3" in status and "0.17.1" in status, status
    assert "\x1b[" not in on_terminal("status", NO_COLOR="1")
    assert "\x1b[" not in on_terminal("diff", NO_COLOR="1")


def reader_leaving(command: list[str], after: int, pipe_size: int = 0) -> subprocess.CompletedProcess:
    """``command | head -c AFTER`` (``after`` 0: ``head -1``) on a real pipe, the reader gone before the
    writer is done: ``pipe_size`` (bytes) shrinks the pipe, so output larger than it and ``after``
    must meet a closed pipe, whenever the reader leaves."""
    reader, writer = os.pipe()
    if pipe_size:
        import fcntl

        fcntl.fcntl(writer, 1031, pipe_size)  # F_SETPIPE_SZ
    process = subprocess.Popen(command, stdout=writer, stderr=subprocess.PIPE, text=True)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        taken = b""
        while (b"\n" not in taken) if after == 0 else (len(taken) < after):
            chunk = pipe.read1(100 if after == 0 else after - len(taken))
            if not chunk:
                break
            taken += chunk
    stderr = process.communicate()[1]
    assert taken, "the command printed nothing"
    return subprocess.CompletedProcess(command, process.returncode, taken, stderr)


@pytest.mark.parametrize("after", [0, 100, 200_000])  # head -1, head -c 100, head -c 200K
def test_a_reader_that_goes_away_ends_diff_with_141(release, after):
    """Issue 29.6: ``diff | head -1`` exited 0 (Python's stdout drops what a closed pipe did not take,
    and says nothing); as for git or cat, a reader that leaves before the end is exit 141, quietly."""
    command = [sys.executable, "-m", "vllm_eagle3_patch", "--vllm-dir", str(release("0.17.1")), "diff"]
    completed = reader_leaving(command, after)  # the diff is 300 KB: more than 200 KB and a 64 KB pipe
    assert (completed.returncode, completed.stderr) == (141, ""), completed


def test_every_command_ends_with_141_when_its_reader_is_gone(release, tmp_path):
    """The same rule for every command: no reader at all, or one that leaves after a line."""
    package_dir = release("0.17.1")
    tool = [sys.executable, "-m", "vllm_eagle3_patch", "--vllm-dir", str(package_dir)]
    completed = reader_leaving([*tool, "status"], after=0, pipe_size=4096)  # status prints 7 KB
    assert (completed.returncode, completed.stderr) == (141, ""), completed
    drafter = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(drafter))
    commands = (["status", "--json"], ["revert"], ["verify", "--static"], ["doctor", "--drafter", str(tmp_path)])
    for args in commands:
        reader, writer = os.pipe()
        os.close(reader)
        completed = subprocess.run([*tool, *args], stdout=writer, stderr=subprocess.PIPE, text=True)
        os.close(writer)
        assert completed.returncode == 141, (args, completed.stderr)


def test_the_readme_install_line_works_in_a_fresh_environment(tmp_path):
    """The README's install line, as written, in a new virtual environment, run in a checkout (whose
    folder is rarely named after the repository)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "pip install vllm-eagle3-patch" not in readme  # not on PyPI: no line may promise it
    (line,) = [line for line in readme.splitlines() if line.startswith("pip install ")]
    checkout = tmp_path / "checkout"
    ignored = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", ".pytest_cache", ".hypothesis"
    )
    shutil.copytree(Path(__file__).parent.parent, checkout, ignore=ignored)
    home = tmp_path / "fresh"
    venv.create(home, with_pip=True)
    command = line.split("#", 1)[0].split()
    installed = subprocess.run(
        [home / "bin" / "python", "-m", *command, "--quiet"], cwd=checkout, capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    version = subprocess.run([home / "bin" / "vllm-eagle3-patch", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("vllm-eagle3-patch ")


def test_an_unpatchable_family_file_is_left_alone_and_blocks_nothing(release):
    """A model family's file the codemod cannot read (here: Gemma 3's decoder loop removed)
    is reported with its reason; apply patches everything else; the Gemma 3 wrapper, which
    would delegate to it, is left alone too; revert restores the rest."""
    package_dir = release("0.17.1")
    gemma3 = package_dir / "model_executor/models/gemma3.py"
    text = gemma3.read_text()
    gemma3.write_text(
        text.replace("for layer in islice(self.layers, self.start_layer, self.end_layer):", "for layer in self.layers:")
    )
    broken = gemma3.read_bytes()
    report = json.loads(cli(package_dir, "status", "--json").stdout)
    states = {t["file"]: (t["state"], t["reason"]) for t in report["targets"]}
    assert report["state"] == "unpatched" and "model_executor/models/gemma3.py" in report["reason"], report
    assert states["model_executor/models/gemma3.py"][0] == "unsupported"
    assert "a loop over self.layers" in states["model_executor/models/gemma3.py"][1]
    assert states["model_executor/models/gemma3_mm.py"][0] == "unsupported"
    assert "gemma3.py is unsupported" in states["model_executor/models/gemma3_mm.py"][1]
    applied = cli(package_dir, "apply")
    assert applied.returncode == 0, applied.stderr
    after = {t["file"]: t["state"] for t in json.loads(cli(package_dir, "status", "--json").stdout)["targets"]}
    assert after.pop("model_executor/models/gemma3.py") == "unsupported" and gemma3.read_bytes() == broken
    assert after.pop("model_executor/models/gemma3_mm.py") == "unsupported"
    found_but_unrecognised = {path for path, (state, _) in states.items() if state == "unsupported"}
    assert {path for path, state in after.items() if state != "patched"} < found_but_unrecognised, after
    assert cli(package_dir, "revert").returncode == 0
    assert record_mismatches(package_dir) == ["vllm/model_executor/models/gemma3.py"]


def test_an_unpatchable_deepseek_file_still_refuses_the_run(release):
    package_dir = release("0.17.1")
    deepseek = package_dir / DEEPSEEK
    deepseek.write_text(
        deepseek.read_text().replace("islice(self.layers, self.start_layer, self.end_layer)", "self.layers")
    )
    untouched = tree_digest(package_dir.parent)
    applied = cli(package_dir, "apply")
    assert applied.returncode == 1 and "deepseek_v2.py" in applied.stderr
    assert tree_digest(package_dir.parent) == untouched
