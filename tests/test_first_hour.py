"""What a new user's first hour hits, run as the user runs it: real trees, real interpreters, real users.

Each test names the defect it guards against; each failed before the fix.
"""

from __future__ import annotations

import io
import json
import os
import py_compile
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.bytes_on_disk import record_mismatches
from helpers.cli import run_cli, status_of
from helpers.cli import run_on as cli
from helpers.environments import python_with_path_entries

from vllm_eagle3_patch.catalog import DEEPSEEK_V2, FAMILIES

ONE_LINE_ERROR = "vllm-eagle3-patch: error: "
REPO = Path(__file__).resolve().parents[1]


def as_nobody(*args: str, home: Path) -> subprocess.CompletedProcess:
    """This tool as the unprivileged ``nobody``, with this interpreter's packages."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HOME": str(home), "NO_COLOR": "1"}
    env.pop("VLLM_EAGLE3_PATCH_VERDICT_CACHE", None)  # nobody's own cache, under its HOME
    command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m"]
    return subprocess.run([*command, "vllm_eagle3_patch", *args], capture_output=True, text=True, env=env)


def readable_by_all(*paths: Path) -> None:
    """Every directory above the tree lets others in, as site-packages does."""
    above = {directory for path in paths for directory in (path, *path.parents)}
    for directory in above - {Path("/"), Path("/tmp")}:
        if directory.is_dir():
            directory.chmod((directory.stat().st_mode & 0o7777) | 0o755)


def assert_one_line(completed: subprocess.CompletedProcess, *words: str) -> None:
    assert completed.returncode == 1, completed
    assert completed.stderr.startswith(ONE_LINE_ERROR) and completed.stderr.count("\n") == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    for word in words:
        assert word in completed.stderr, completed.stderr


# --------------------------------------------------------------------------- 1. the state after a root apply


def test_a_non_root_user_reads_the_state_after_a_root_apply(release, tmp_path):
    """A Docker build applies as root with a strict umask; the pod runs ``status --json`` as another user."""
    package_dir = release("0.17.1")
    readable_by_all(package_dir, tmp_path)
    old_umask = os.umask(0o077)
    try:
        assert cli(package_dir, "apply", "-q").returncode == 0
    finally:
        os.umask(old_umask)
    init_mode = stat.S_IMODE((package_dir / "__init__.py").stat().st_mode)
    state_dir = package_dir / ".vllm-eagle3-patch"
    kept = [path for path in state_dir.rglob("*") if path.is_file() and path.name != "lock"]
    assert kept and all(stat.S_IMODE(path.stat().st_mode) == init_mode for path in kept)
    completed = as_nobody("--vllm-dir", str(package_dir), "status", "--json", home=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["state"] == "patched" and "unreadable_state" not in report
    applied = [target for target in report["targets"] if target["state"] != "unsupported"]  # not left alone
    assert all(target["reason"].startswith("applied by vllm-eagle3-patch") for target in applied)


def test_an_unreadable_state_is_said_in_one_line_and_the_hashes_still_speak(release, tmp_path):
    """A state written by an older release of this tool (mode 0600): status says so, and still answers."""
    package_dir = release("0.17.1")
    readable_by_all(package_dir, tmp_path)
    assert cli(package_dir, "apply", "-q").returncode == 0
    (package_dir / ".vllm-eagle3-patch" / "manifest.json").chmod(0o600)
    completed = as_nobody("--vllm-dir", str(package_dir), "status", "--json", home=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert "manifest.json: cannot be read by this user" in report["unreadable_state"]
    assert report["state"] == "patched" and "cannot be read" in report["reason"]
    applied = [target for target in report["targets"] if target["state"] != "unsupported"]  # not left alone
    assert all("manifest cannot be read here" in target["reason"] for target in applied)
    verify = as_nobody(
        "--vllm-dir", str(package_dir), "verify", "--static", "--interpreter", "/bin/true", home=tmp_path
    )
    assert verify.returncode == 0 and "its manifest cannot be read here" in verify.stdout, verify


# --------------------------------------------------------------------------- 2. naming the install


@pytest.mark.parametrize("python", ["/bin/true", "/bin/echo"])
def test_a_program_that_is_not_python_gets_one_line(python):
    assert_one_line(run_cli("--python", python, "status"), python, "expected a Python interpreter")


def test_a_directory_without_an_interpreter_gets_one_line(tmp_path):
    assert_one_line(run_cli("--python", str(tmp_path), "status"), "a directory without bin/python")


def test_a_virtual_environment_directory_is_its_interpreter(release, tmp_path):
    package_dir = release("0.17.1")
    python_with_path_entries(tmp_path / "env", package_dir.parent)
    completed = run_cli("--python", str(tmp_path / "env"), "status", "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["vllm_dir"] == str(package_dir)


def test_site_packages_for_vllm_dir_suggests_the_package(release):
    package_dir = release("0.17.1")
    assert_one_line(run_cli("--vllm-dir", str(package_dir.parent), "status"), f"did you mean --vllm-dir {package_dir}")


def test_the_install_options_work_after_the_subcommand_too(release):
    package_dir = release("0.17.1")
    completed = run_cli("status", "--json", "--vllm-dir", str(package_dir))
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["vllm_dir"] == str(package_dir)
    assert run_cli("--vllm-dir", str(package_dir), "status", "--python", sys.executable).returncode == 1


def test_no_vllm_here_names_the_options_that_find_one(tmp_path):
    python = python_with_path_entries(tmp_path / "env")
    assert_one_line(run_cli("--python", str(python), "status"), "--vllm-dir")
    here = run_cli("status", env={"PYTHONPATH": ""}, cwd=tmp_path)
    if here.returncode == 1:  # this interpreter has no vllm of its own
        assert_one_line(here, "--python PATH", "--vllm-dir")


# --------------------------------------------------------------------------- 3. the layer ids apply writes


def default_getter_in(package_dir: Path) -> bool:
    return "return (2, num_layers // 2, num_layers - 3)" in (package_dir / DEEPSEEK_V2.path).read_text()


@pytest.mark.parametrize("ids", ["1,2", "1,2,3,4", "1,1,2", "-1,2,3"])
def test_aux_layers_are_three_distinct_ids(release, ids):
    package_dir = release("0.17.1")
    completed = cli(package_dir, "apply", "--aux-layers", ids)
    assert completed.returncode == 2 and "--aux-layers" in completed.stderr
    assert "expected one argument" not in completed.stderr and f"'{ids}'" in completed.stderr  # its own check spoke
    assert status_of(package_dir)["state"] == "unpatched"


def test_apply_says_which_ids_it_writes_and_default_returns_to_the_default(release):
    package_dir = release("0.17.1")
    first = cli(package_dir, "apply", "--aux-layers", "1,2,3")
    assert first.returncode == 0 and "aux layer ids: 1, 2, 3 (--aux-layers)" in first.stdout
    again = cli(package_dir, "apply")
    assert "aux layer ids: 1, 2, 3 (kept from the last apply" in again.stdout and not default_getter_in(package_dir)
    back = json.loads(cli(package_dir, "apply", "--aux-layers", "default", "--json").stdout)
    assert back["aux_layers"] is None and back["aux_layers_source"] == "--aux-layers default"
    assert default_getter_in(package_dir) and status_of(package_dir)["aux_layers"] is None


def test_apply_after_a_reinstall_says_it_keeps_the_last_ids(release):
    package_dir = release("0.17.1")
    original = (package_dir / DEEPSEEK_V2.path).read_bytes()
    assert cli(package_dir, "apply", "-q", "--aux-layers", "1,2,3").returncode == 0
    (package_dir / DEEPSEEK_V2.path).write_bytes(original)  # what a reinstall of the same release does
    completed = cli(package_dir, "apply")
    assert completed.returncode == 0 and "aux layer ids: 1, 2, 3 (kept from the last apply" in completed.stdout


def test_the_help_does_not_offer_ids_the_docs_call_one_layer_off():
    assert "1,29,57" not in run_cli("apply", "--help").stdout


# --------------------------------------------------------------------------- 4. verify without torch


def test_verify_with_static_checks_alone_is_not_a_pass(release):
    package_dir = release("0.17.1")
    assert cli(package_dir, "apply", "-q").returncode == 0
    static = cli(package_dir, "verify", "--interpreter", sys.executable)  # this interpreter has no torch
    assert static.returncode == 3 and "NOT VERIFIED" in static.stdout
    assert cli(package_dir, "verify", "--static", "--interpreter", sys.executable).returncode == 0
    assert cli(package_dir, "revert", "-q").returncode == 0
    assert cli(package_dir, "verify", "--static", "--interpreter", sys.executable).returncode == 1


# --------------------------------------------------------------------------- 5. what the tool says it covers


def test_the_help_and_the_state_name_the_registry_families(release):
    described = " ".join(run_cli("--help").stdout.split())
    assert all(family.name in described for family in FAMILIES)
    assert "0.8.5-0.17.1" not in described
    report = status_of(release("0.17.1"))
    left_alone = [t["file"] for t in report["targets"] if t["state"] == "unsupported"]  # each row says why
    patchable = [t for t in report["targets"] if t["state"] == "unpatched" and "models/" in t["file"]]
    assert FAMILIES[0].name in report["reason"] and f"{len(patchable) - 2} more model file(s)" in report["reason"]
    assert f"{left_alone[0]} and {len(left_alone) - 1} more" in report["reason"]
    assert len(report["reason"]) < 240, report["reason"]  # one line a terminal shows whole (issue 41)


def test_the_package_description_names_no_release_range():
    import tomllib

    description = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["description"]
    assert "0.17.1" not in description and "DeepSeek" not in description


@pytest.mark.unit
def test_the_wheel_lists_every_package_of_the_tool():
    """A non-editable install (the README's demo, a wheel) ships only the packages ``pyproject.toml`` names."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    root = REPO / "vllm_eagle3_patch"
    found = {
        ".".join(("vllm_eagle3_patch", *d.relative_to(root).parts))
        for d in root.rglob("*")
        if (d / "__init__.py").is_file()
    }
    found |= {"vllm_eagle3_patch", "vllm_eagle3_patch.patches"}
    assert found <= listed, sorted(found - listed)


# --------------------------------------------------------------------------- 6. hints, rows, bytecode


def test_the_record_refusal_names_the_interpreter_and_the_options(release, tmp_path):
    package_dir = release("0.17.1")
    python = python_with_path_entries(tmp_path / "env", package_dir.parent)
    with open(package_dir / "config" / "speculative.py", "a") as stream:
        stream.write("# edited by hand\n")
    completed = run_cli("--python", str(python), "apply")
    assert_one_line(completed, f"{python} -m pip install --force-reinstall --no-deps vllm==0.17.1")
    assert f"vllm-eagle3-patch --python {python} apply --accept-modified" in completed.stderr


def test_a_stale_manifest_is_said_once_and_the_rows_are_sorted_and_aligned(release):
    package_dir = release("0.17.1")
    originals = {path: path.read_bytes() for path in package_dir.rglob("*.py")}
    assert cli(package_dir, "apply", "-q").returncode == 0
    for path, data in originals.items():  # a reinstall of the same release
        path.write_bytes(data)
    report = status_of(package_dir)
    assert "the manifest is stale" in report["reason"]
    assert not any("stale" in target["reason"] for target in report["targets"])
    files = [target["file"] for target in report["targets"]]
    assert files == sorted(files)
    rows = [line for line in cli(package_dir, "status").stdout.splitlines() if line.startswith("  ")]
    reason_columns = {line.index("  patchable") for line in rows if "  patchable" in line}
    assert len(rows) == len(files) and len(reason_columns) == 1


def test_revert_puts_back_the_bytecode_the_installer_listed(release):
    """pip compiles and lists ``__pycache__`` files in RECORD; apply drops them; revert must restore them."""
    package_dir = release("0.17.1")
    source = package_dir / DEEPSEEK_V2.path
    compiled = Path(py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP))
    add_to_record(package_dir, compiled)
    installed = compiled.read_bytes()
    assert record_mismatches(package_dir) == []
    assert cli(package_dir, "apply", "-q").returncode == 0
    assert not compiled.exists()
    assert cli(package_dir, "revert", "-q").returncode == 0
    assert compiled.read_bytes() == installed and record_mismatches(package_dir) == []
    assert int(source.stat().st_mtime) == int.from_bytes(installed[8:12], "little")  # the bytecode is valid again


def add_to_record(package_dir: Path, compiled: Path) -> None:
    import base64
    import hashlib

    (record,) = package_dir.parent.glob("vllm-*.dist-info/RECORD")
    digest = base64.urlsafe_b64encode(hashlib.sha256(compiled.read_bytes()).digest()).rstrip(b"=").decode()
    relative = compiled.relative_to(package_dir.parent).as_posix()
    with open(record, "a") as stream:
        stream.write(f"{relative},sha256={digest},{compiled.stat().st_size}\n")


@pytest.mark.matrix
def test_the_demo_touches_nothing_outside_tmp(tmp_path):
    """The README's first command, as written: it says nothing outside /tmp is touched."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_CACHE_DIR": str(Path.home() / ".cache/pip")}
    env.pop("VLLM_EAGLE3_PATCH_VERDICT_CACHE", None)
    completed = subprocess.run(
        ["bash", str(REPO / "examples" / "demo.sh"), "0.17.1"], capture_output=True, text=True, env=env
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert re.search(r"patched \d+ file\(s\)", completed.stdout) and "they match its RECORD" in completed.stdout
    assert not (tmp_path / "cache" / "vllm-eagle3-patch").exists()
    rows = re.findall(r"^ +\w+ +model_executor/models/mixtral\.py +", completed.stdout, re.M)
    assert len(rows) == 1, rows  # status's table once: later steps say their one line
    assert "a target on this install for eagle3, extract_hidden_states" in completed.stdout


# --------------------------------------------------------------------------- 7. verify --engine shows its steps


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_engine_steps_are_shown_on_a_terminal_and_nowhere_else():
    """``verify --engine`` takes minutes on a CPU: on a terminal each step says what it is and how long it took."""
    from vllm_eagle3_patch.render import text as render

    assert render.step_reporter(io.StringIO()) is None  # piped or captured: nothing but the result
    terminal = Terminal()
    step = render.step_reporter(terminal)
    with step("building the tiny target and drafters"):
        pass
    with step("engine run 1/3: without a drafter (compiled)"):
        pass
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())  # the spinner's cursor moves
    lines = [line for line in shown.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and "building the tiny target and drafters: 0 s" in lines[0], terminal.getvalue()
    assert "engine run 1/3" in lines[1]


# --------------------------------------------------------------------------- 8. issue 29: what the tool says


def test_verify_rows_each_say_one_thing(release):
    """Issue 29.7: ``ok  gemma3n.py is patched or native: unsupported (left alone)`` said two things."""
    package_dir = release("0.17.1")
    completed = cli(package_dir, "verify", "--interpreter", sys.executable)  # no torch here: the static rows
    rows = [line for line in completed.stdout.splitlines() if line.startswith(("ok  ", "FAIL"))]
    files = {t["file"]: t["state"] for t in status_of(package_dir)["targets"]}
    left_alone = {path for path, state in files.items() if state == "unsupported"}  # optional families' files
    assert left_alone and rows
    for path, state in files.items():
        (row,) = [row for row in rows if row.split()[1] == path]
        if path in left_alone:
            assert row.startswith(f"ok    {path} is left alone: apply cannot patch it: "), row
        else:  # unpatched: fails, and says what it is and what was expected
            assert row.startswith(f"FAIL  {path} is {state}: expected patched or native"), row
    assert not any("patched or native: unsupported" in row for row in rows)


def test_every_error_under_json_is_one_object(release, tmp_path):
    """Issue 29.8: docs/json.md says every command prints one object; an error printed none."""
    package_dir = release("0.17.1")
    (package_dir / DEEPSEEK_V2.path).write_text("# not what the installer wrote\n")
    cases = [
        (["--python", str(tmp_path / "nonexistent"), "status", "--json"], 1, "expected a Python interpreter"),
        (["--json", "--vllm-dir", str(package_dir), "apply"], 1, "differs from the installed vLLM 0.17.1"),
        (["--vllm-dir", str(package_dir), "apply", "--json", "--aux-layers", "1,2"], 2, "expected 3 distinct"),
        (["frobnicate", "--json"], 2, "invalid choice: 'frobnicate'"),
    ]
    for args, code, words in cases:
        completed = run_cli(*args)
        assert completed.returncode == code, (args, completed)
        answer = json.loads(completed.stdout)
        assert answer["exit_code"] == code and words in answer["error"], (args, answer)
        assert words in completed.stderr and "Traceback" not in completed.stderr


def test_status_model_without_check_reports_and_exits_0(release):
    """Issue 29.9: ``--model`` alone said its verdict and exited 1, as only ``--check`` should."""
    package_dir = release("0.17.1")
    alone = cli(package_dir, "status", "--model", "MixtralForCausalLM")
    assert alone.returncode == 0 and "model: MixtralForCausalLM" in alone.stdout, alone
    (line,) = alone.stdout.splitlines()  # issue 41.2: one line, the verdict and the command that fixes it
    assert line.endswith(f"; fix: vllm-eagle3-patch --vllm-dir {package_dir} apply"), line
    verbose = cli(package_dir, "status", "--model", "MixtralForCausalLM", "--verbose").stdout
    assert "state: unpatched" in verbose and verbose.splitlines()[-1] == line
    report = json.loads(cli(package_dir, "status", "--model", "MixtralForCausalLM", "--json").stdout)
    assert report["model"]["eagle3_target"] is False  # not before apply: --check makes that the exit code
    assert cli(package_dir, "status", "--check", "--model", "MixtralForCausalLM", "-q").returncode == 1
    assert "with --check, exit 0 when it is" in " ".join(run_cli("status", "--help").stdout.split())


def test_quiet_and_json_work_on_either_side_of_the_command(release):
    """Issue 29.10: ``--python`` worked before the command or after it; ``-q`` and ``--json`` only after."""
    package_dir = release("0.17.1")
    before = run_cli("--json", "--vllm-dir", str(package_dir), "status")
    assert before.returncode == 0 and json.loads(before.stdout)["vllm_dir"] == str(package_dir)
    quiet = run_cli("-q", "--vllm-dir", str(package_dir), "status", "--check")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")


def test_a_read_only_apply_is_refused_before_any_work(release, tmp_path):
    """Issue 29.10: as a user who may not write vLLM, apply wrote out every patched text (12 s) before
    refusing; it says so at once, naming the directory, and an apply with nothing to do still passes."""
    package_dir = release("0.17.1")
    readable_by_all(package_dir, tmp_path)
    refused = as_nobody("--vllm-dir", str(package_dir), "apply", home=tmp_path)
    assert_one_line(refused, f"{package_dir}: this user may not write here (Permission denied)")
    assert status_of(package_dir)["state"] == "unpatched" and not (package_dir / ".vllm-eagle3-patch").exists()
    assert cli(package_dir, "apply", "-q").returncode == 0
    again = as_nobody("--vllm-dir", str(package_dir), "apply", home=tmp_path)
    assert again.returncode == 0 and "already patched; nothing to do" in again.stdout, again


def test_the_readme_says_the_measured_cold_time_and_a_checkout_of_any_name():
    """Issue 29.10: the README's CI time is the one docs/testing.md measured with the cache filled, rounded up;
    ``pip install ./vllm-eagle3-patch`` assumed a checkout's name."""
    readme = (REPO / "README.md").read_text()
    testing = (REPO / "docs/testing.md").read_text()
    measured = re.search(r"\*\*warm\*\*[^*]*?(\d+(?:\.\d+)?)(?: to (\d+(?:\.\d+)?))? minutes", testing, re.S)
    assert measured is not None
    low, high = (-int(-float(m) // 1) if m else None for m in measured.groups())  # rounded up
    said = f"{low} to {high} minutes" if high is not None else f"{low} minutes"
    assert f"{said} on 2 CPUs with its cache filled (measured)" in readme
    assert "./vllm-eagle3-patch" not in readme and "COPY vllm-eagle3-patch " not in readme


def test_the_unit_tier_needs_nothing_but_the_checkout(tmp_path):
    """Issue 41.1: collecting and running ``pytest -m unit`` reads no release and downloads nothing (the wheel cache
    it is pointed at stays empty), so it runs offline on a fresh checkout."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {**os.environ, "VLLM_EAGLE3_PATCH_CACHE": str(cache), "PIP_NO_INDEX": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "unit", str(REPO / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert list(cache.iterdir()) == []
