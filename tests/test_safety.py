"""Never half-patched, never lost: real signals, real concurrent processes, real reinstalls."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.bytes_on_disk import record_mismatches, tree_digest
from helpers.cli import run_cli
from helpers.cli import run_on as cli
from helpers.cli import status_of as state
from helpers.environments import python_with_path_entries
from helpers.paused_run import kill_at_pause, spawn_paused

DEEPSEEK = "model_executor/models/deepseek_v2.py"


def file_versions(package_dir: Path, originals: dict[str, str], patched: dict[str, str]) -> dict[str, str]:
    """For every target file: "original" or "patched" by hash, or "BROKEN"."""
    versions = {}
    digests = {path: sha256_of(package_dir / path) if (package_dir / path).exists() else None for path in originals}
    for path in originals:
        digest = digests[path]
        versions[path] = "original" if digest == originals[path] else "patched" if digest == patched[path] else "BROKEN"
    return versions


def spawn(package_dir: Path, command: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vllm_eagle3_patch", "--vllm-dir", str(package_dir), command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kill_when(process: subprocess.Popen, ready, timeout: float = 60.0) -> None:
    """SIGKILL ``process`` the moment ``ready()`` turns true (or when it exits by itself)."""
    deadline = time.monotonic() + timeout
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_kill_9_at_any_moment_leaves_whole_files_and_a_truthful_status(release):
    package_dir = release("0.16.0")
    targets = [t["file"] for t in state(package_dir)["targets"] if t["state"] == "unpatched"]  # not left alone
    before = tree_digest(package_dir)
    started = time.monotonic()
    assert cli(package_dir, "apply").returncode == 0
    duration = time.monotonic() - started
    after = tree_digest(package_dir)
    assert cli(package_dir, "revert").returncode == 0
    originals = {p: before[p] for p in targets}
    patched = {p: after[p] for p in targets}
    manifest = package_dir / ".vllm-eagle3-patch" / "manifest.json"
    first_target = package_dir / targets[0]

    rng = random.Random(20261130)
    moments = [
        ("apply", lambda: manifest.exists()),  # between the manifest and the files
        ("apply", lambda: sha256_of(first_target) == patched[targets[0]]),  # after the first file
        ("revert", lambda: not manifest.exists()),  # after the files, while the state dir goes
        *[(command, rng.uniform(0.1, 1.2) * duration) for command in ("apply", "revert") * 4],
    ]
    seen = set()
    for attempt, (command, moment) in enumerate(moments):
        if command == "revert" and not manifest.exists():
            assert cli(package_dir, "apply").returncode == 0
        if command == "apply" and state(package_dir)["state"] == "patched":
            assert cli(package_dir, "revert").returncode == 0
        process = spawn(package_dir, command)
        if callable(moment):
            kill_when(process, moment)
        else:
            time.sleep(moment)
            process.send_signal(signal.SIGKILL)
            process.wait()
        versions = file_versions(package_dir, originals, patched)
        assert "BROKEN" not in versions.values(), (attempt, command, versions)
        seen.add(tuple(sorted(versions.values())))
        report = state(package_dir)
        for target in (t for t in report["targets"] if t["file"] in versions):
            expected = {"original": "unpatched", "patched": "patched"}[versions[target["file"]]]
            assert target["state"] == expected, (attempt, command, target, versions)
    assert len(seen) >= 2, f"the kills never landed between two states: {seen}"

    assert cli(package_dir, "apply").returncode == 0
    assert state(package_dir)["state"] == "patched"
    assert cli(package_dir, "revert").returncode == 0
    assert record_mismatches(package_dir) == []


def test_a_second_run_waits_for_the_lock_then_refuses(release):
    package_dir = release("0.17.1")
    lock_dir = package_dir / ".vllm-eagle3-patch"
    lock_dir.mkdir()
    with open(lock_dir / "lock", "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        untouched = tree_digest(package_dir)
        started = time.monotonic()
        completed = cli(package_dir, "apply")
        waited = time.monotonic() - started
    assert completed.returncode == 1
    assert "another vllm-eagle3-patch is working on this vLLM" in completed.stderr
    assert waited >= 9, "it should have waited for the lock"
    assert tree_digest(package_dir) == untouched


def test_concurrent_applies_and_reverts_never_interleave(release):
    package_dir = release("0.17.1")
    targets = sum(t["state"] == "unpatched" for t in state(package_dir)["targets"])  # all but those left alone
    for command in ("apply", "revert"):
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "vllm_eagle3_patch", "--vllm-dir", str(package_dir), command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        outputs = [p.communicate() for p in processes]
        assert [p.returncode for p in processes] == [0, 0, 0], outputs
        if command == "apply":
            assert sum(f"patched {targets} file(s)" in out for out, _ in outputs) == 1, outputs
            assert state(package_dir)["state"] == "patched"
    assert record_mismatches(package_dir) == []
    assert not (package_dir / ".vllm-eagle3-patch").exists()


@pytest.mark.parametrize("mode", ["checked-hash", "unchecked-hash", "timestamp"])
def test_python_runs_the_new_code_whatever_the_bytecode_cache(release, cpu_python, mode):
    package_dir = release("0.17.1")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "--invalidation-mode", mode, str(package_dir / "model_executor")],
        check=True,
    )
    probe = (
        "import vllm.model_executor.models.deepseek_v2 as m; "
        "print(hasattr(m.DeepseekV2ForCausalLM, 'get_eagle3_aux_hidden_state_layers'))"
    )

    def has_methods() -> str:
        env = {**os.environ, "PYTHONPATH": str(package_dir.parent), "VLLM_LOGGING_LEVEL": "ERROR"}
        completed = subprocess.run([cpu_python, "-c", probe], capture_output=True, text=True, env=env)
        assert completed.returncode == 0, completed.stderr[-2000:]
        return completed.stdout.strip().splitlines()[-1]

    assert has_methods() == "False"
    assert cli(package_dir, "apply").returncode == 0
    assert has_methods() == "True"
    assert cli(package_dir, "revert").returncode == 0
    assert has_methods() == "False"


def test_mode_line_endings_and_symlinked_package_dir(release, tmp_path):
    package_dir = release("0.17.1")
    target = package_dir / DEEPSEEK
    crlf = target.read_bytes().replace(b"\n", b"\r\n")
    target.write_bytes(crlf)
    target.chmod(0o640)
    link = tmp_path / "vllm"
    link.symlink_to(package_dir, target_is_directory=True)

    refused = cli(link, "apply")  # CRLF is not what the wheel installed
    assert refused.returncode == 1 and "differs from the installed vLLM 0.17.1 (RECORD)" in refused.stderr
    assert cli(link, "apply", "--accept-modified").returncode == 0
    patched = target.read_bytes()
    assert b"vllm-eagle3-patch" in patched
    assert patched.count(b"\n") == patched.count(b"\r\n"), "a line lost its CRLF"
    assert (target.stat().st_mode & 0o777) == 0o640
    assert state(link)["vllm_version"] == "0.17.1"
    assert cli(link, "revert").returncode == 0
    assert target.read_bytes() == crlf


@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])  # 0.33.0: DeepSeek's files native, only the families' change
def test_nothing_is_written_outside_the_package_and_the_state_dir(release, version):
    package_dir = release(version)
    outside = tree_digest(package_dir.parent / f"vllm-{version}.dist-info")
    before = tree_digest(package_dir)
    assert cli(package_dir, "apply").returncode == 0
    after = tree_digest(package_dir)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    targets = {t["file"] for t in state(package_dir)["targets"] if t["state"] == "patched"}
    assert {p for p in changed if not p.startswith(".vllm-eagle3-patch/")} == targets
    assert tree_digest(package_dir.parent / f"vllm-{version}.dist-info") == outside


def test_a_backup_that_no_longer_matches_is_never_restored(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    backup = package_dir / ".vllm-eagle3-patch" / "backups" / DEEPSEEK
    backup.write_text(backup.read_text() + "# tampered\n")
    patched_tree = tree_digest(package_dir)
    completed = cli(package_dir, "revert", "--force")
    assert completed.returncode == 1
    assert "no longer matches the manifest" in completed.stderr and completed.stderr.count("\n") == 1
    assert tree_digest(package_dir) == patched_tree


def test_reinstall_and_upgrade_over_a_patched_vllm(venv_with_vllm):
    python = str(venv_with_vllm / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps"]
    assert run_cli("--python", python, "apply", "-q").returncode == 0

    subprocess.run([*pip, "--force-reinstall", "vllm==0.17.1"], check=True)
    report = json.loads(run_cli("--python", python, "status", "--json").stdout)
    assert report["state"] == "unpatched"
    assert "manifest is stale" in report["reason"]  # once, not on every row
    assert not any("stale" in target["reason"] for target in report["targets"])
    assert run_cli("--python", python, "apply", "-q").returncode == 0
    assert json.loads(run_cli("--python", python, "status", "--json").stdout)["state"] == "patched"

    subprocess.run([*pip, "vllm==0.17.0"], check=True)
    report = json.loads(run_cli("--python", python, "status", "--json").stdout)
    assert report["vllm_version"] == "0.17.0" and report["state"] == "unpatched"
    assert "written for vLLM 0.17.1" in report["reason"]
    assert run_cli("--python", python, "apply", "-q").returncode == 0
    assert run_cli("--python", python, "revert", "-q").returncode == 0
    assert record_mismatches(Path(report["vllm_dir"])) == []

    subprocess.run([*pip, "vllm==0.17.1"], check=True)  # leave the shared environment as it was


def test_a_read_only_install_is_refused_in_one_line(release, tmp_path):
    """A user who may not write site-packages (here: ``nobody`` on root's files) gets one line."""
    package_dir = release("0.17.1")
    for path in {*package_dir.parents, *tmp_path.parents, tmp_path} - {Path("/"), Path("/tmp")}:
        path.chmod((path.stat().st_mode & 0o7777) | 0o755)  # nobody may read the tree, not write it
    untouched = tree_digest(package_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HOME": str(tmp_path)}
    completed = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m", "vllm_eagle3_patch",
         "--vllm-dir", str(package_dir), "apply"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Permission denied" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert tree_digest(package_dir) == untouched


def test_an_editable_style_install_from_a_source_checkout(release, tmp_path):
    """vLLM imported from a checkout through a ``.pth`` path entry, with no dist-info beside it."""
    checkout = tmp_path / "vllm-src"
    checkout.mkdir()
    package_dir = release("0.17.1")
    os.rename(package_dir, checkout / "vllm")
    python = python_with_path_entries(tmp_path / "env", checkout, pth="__editable__.vllm.pth")

    report = json.loads(run_cli("--python", str(python), "status", "--json").stdout)
    assert report["vllm_dir"] == str(checkout / "vllm") and report["vllm_version"] == "unknown"
    assert report["state"] == "unpatched"
    before = tree_digest(checkout / "vllm")
    assert run_cli("--python", str(python), "apply").returncode == 0
    assert json.loads(run_cli("--python", str(python), "status", "--json").stdout)["state"] == "patched"
    assert run_cli("--python", str(python), "revert").returncode == 0
    assert tree_digest(checkout / "vllm") == before


def test_a_manifest_path_through_a_directory_link_is_refused(release, tmp_path):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (package_dir / "escape").symlink_to(outside, target_is_directory=True)
    manifest_path = package_dir / ".vllm-eagle3-patch" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["escape/deepseek_v2.py"] = manifest["files"].pop(DEEPSEEK)
    manifest_path.write_text(json.dumps(manifest))
    before = tree_digest(package_dir)
    completed = cli(package_dir, "revert", "--force")
    assert completed.returncode == 1 and "a link leads it outside" in completed.stderr
    assert completed.stderr.count("\n") == 1
    assert tree_digest(package_dir) == before and list(outside.iterdir()) == []


def test_a_file_that_is_not_utf8_is_refused_with_nothing_written(release):
    package_dir = release("0.17.1")
    target = package_dir / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"# caf\xe9 in latin-1\n")
    untouched = tree_digest(package_dir)
    report = state(package_dir)
    assert report["state"] == "unsupported" and "not UTF-8" in report["reason"]
    completed = cli(package_dir, "apply")
    assert completed.returncode == 1 and DEEPSEEK in completed.stderr
    assert tree_digest(package_dir) == untouched


def leftovers(package_dir: Path) -> list[str]:
    """Every temporary file in the tree, this tool's name pattern or any other ``.*.tmp``."""
    return sorted(str(path.relative_to(package_dir)) for path in package_dir.rglob(".*.tmp"))


def test_kill_9_mid_run_is_named_by_status_and_the_next_run_finishes_or_undoes_it(release, tmp_path):
    """Issue 29.5: every target file or none, as the README promises.  A kill between two files of
    a real ``apply`` or ``revert`` is ``interrupted`` in status (``--check`` fails); the next ``apply``
    finishes or redoes it, the next ``revert`` finishes or undoes it; no temporary file is left.

    Each run stops itself at the exact rename the case is about and is killed there
    (``helpers/paused_run.py``): a kill timed by watching the tree would race the writer."""
    package_dir = release("0.17.1")
    models = package_dir / "model_executor" / "models"
    state_dir = package_dir / ".vllm-eagle3-patch"
    journal = state_dir / "journal.json"
    marker = tmp_path / "paused"

    def kill_9(command: str, moment: str) -> None:
        """``command`` killed just ``moment`` its first rename of a file into vLLM's model directory."""
        process = spawn_paused(marker, moment, models, "--vllm-dir", str(package_dir), command)
        kill_at_pause(process, marker)
        assert journal.exists()

    def interrupted(command: str) -> dict:
        report = state(package_dir)
        assert report["state"] == "interrupted", report["reason"]
        assert report["reason"].startswith(f"{command} was interrupted"), report["reason"]
        assert report["interrupted"]["command"] == command and report["interrupted"]["running"] is False
        assert cli(package_dir, "status", "--check", "-q").returncode == 1
        return report

    # apply killed while the new texts sit beside vLLM's files (all written before the first rename); revert undoes it
    kill_9("apply", "before")
    left = leftovers(package_dir)
    assert any(name.startswith("model_executor/models/.") for name in left), left
    assert all(name.endswith(".py.vllm-eagle3-patch.tmp") for name in left), left
    reason = interrupted("apply")["reason"]
    assert f"{len(left)} temporary file(s) ({package_dir / left[0]})" in reason, reason  # named, with who removes it
    undone = cli(package_dir, "revert")
    assert undone.returncode == 0 and "undid the interrupted apply" in undone.stdout, undone
    assert record_mismatches(package_dir) == [] and leftovers(package_dir) == [] and not state_dir.exists()

    # apply killed after its first file; apply finishes it
    kill_9("apply", "after")
    report = interrupted("apply")
    assert {t["state"] for t in report["targets"]} >= {"patched", "unpatched"}  # each row is what its file is
    finished = cli(package_dir, "apply")
    assert finished.returncode == 0 and "finished the interrupted apply" in finished.stdout, finished
    assert state(package_dir)["state"] == "patched" and not journal.exists() and leftovers(package_dir) == []

    # revert killed after its first file; apply patches again, then a killed revert is finished by revert
    for command, then in (("revert", "apply"), ("revert", "revert")):
        kill_9(command, "after")
        interrupted("revert")
        completed = cli(package_dir, then)
        assert completed.returncode == 0, completed
        verb = "finished" if then == "revert" else "undid"
        assert f"{verb} the interrupted revert" in completed.stdout, completed.stdout
    assert record_mismatches(package_dir) == [] and leftovers(package_dir) == [] and not state_dir.exists()
