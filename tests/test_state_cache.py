"""``status`` remembers verdicts by the hash of everything they depend on, and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.cli import run_cli

from vllm_eagle3_patch.codemod.family import Family, FoundWrapper, Wrapper
from vllm_eagle3_patch.codemod.patch import Options, State, Verdict
from vllm_eagle3_patch.discovery import Discovery, decoder, encode
from vllm_eagle3_patch.eagle3.python_layout import (
    ClassSpan,
    Layouts,
    layout_of,
    python_tree,
    source_digest,
    source_lines,
)
from vllm_eagle3_patch.eagle3.release import Release
from vllm_eagle3_patch.verdict_cache import StateCache

RUNNER = "v1/worker/gpu_model_runner.py"
MODEL = "model_executor/models/deepseek_v2.py"


def status(package_dir: Path, cache: Path | str) -> tuple[dict, str]:
    """``status --json`` and the modules it imported (``-X importtime``)."""
    result = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "vllm_eagle3_patch",
            "--vllm-dir",
            str(package_dir),
            "status",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={"VLLM_EAGLE3_PATCH_VERDICT_CACHE": str(cache), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return json.loads(result.stdout), result.stderr


def states(report: dict) -> dict[str, str]:
    return {t["file"]: t["state"] for t in report["targets"]}


def test_a_second_status_answers_from_hashes_without_importing_libcst(release, tmp_path):
    package_dir = release("0.17.1")
    first, first_imports = status(package_dir, tmp_path / "cache")
    second, second_imports = status(package_dir, tmp_path / "cache")
    assert first == second and first["state"] == "unpatched"
    assert "libcst" in first_imports and "libcst" not in second_imports
    # one verdict per target file and the families found by rule in the registry; beside them, what the tree's
    # files held and where their statements lie
    assert len(verdicts(tmp_path / "cache")) == len(first["targets"]) + 1
    assert [len(list((tmp_path / "cache").glob(f"{kind}-*.json"))) for kind in ("scan", "layouts")] == [1, 1]


def test_another_tree_of_the_same_release_reuses_the_families_found_and_an_edited_one_does_not(release, tmp_path):
    """The families found by rule are kept by release, not by path (a second environment, a fresh copy), and
    reused only while every file they were read from is the same."""
    cache = tmp_path / "cache"
    first, _ = status(release("0.17.1"), cache)
    entries = verdicts(cache)
    other = release("0.17.1")
    assert status(other, cache)[0]["targets"] == first["targets"]
    assert verdicts(cache) == entries  # nothing judged again: the same entries answered
    registry = other / "model_executor/models/registry.py"
    registry.write_text(registry.read_text().replace('("olmo", "OlmoForCausalLM")', '("olmo", "OlmoMissing")'))
    files = {t["file"] for t in status(other, cache)[0]["targets"]}
    assert files == {t["file"] for t in first["targets"]} - {"model_executor/models/olmo.py"}


def verdicts(cache: Path) -> set[Path]:
    """The cache's verdicts, without what each tree's files held (``scan-*.json``) and where the statements of a
    release's files lie (``layouts-*.json``)."""
    return set(cache.glob("*.json")) - set(cache.glob("scan-*.json")) - set(cache.glob("layouts-*.json"))


def status_after_edit(package_dir: Path, cache: Path, relative: str, old: str, new: str) -> tuple[dict, str]:
    """``status`` (filling the cache), then ``relative`` edited, then ``status`` again."""
    status(package_dir, cache)
    path = package_dir / relative
    path.write_text(path.read_text().replace(old, new))
    return status(package_dir, cache)


def test_a_changed_file_beside_the_target_is_noticed(release, tmp_path):
    report, imports = status_after_edit(
        release("0.17.1"), tmp_path / "cache", RUNNER, ".get_eagle3_aux_hidden_state_layers(", ".get_eagle3_ids("
    )  # V1's runner now asks a getter this tool cannot read: the release is unknown, its verdicts stale
    assert states(report)[MODEL] == "unsupported" and "libcst" in imports
    assert report["state"] == "unknown"


def test_a_changed_target_file_is_judged_afresh(release, tmp_path):
    report, _ = status_after_edit(
        release("0.17.1"), tmp_path / "cache", MODEL, "class DeepseekV2Model(", "class DeepseekV2Renamed("
    )
    assert states(report)[MODEL] == "unsupported"


def test_an_unusable_or_damaged_cache_changes_no_answer(release, tmp_path):
    package_dir = release("0.17.1")
    expected, _ = status(package_dir, tmp_path / "cache")
    for entry in (tmp_path / "cache").glob("*.json"):
        entry.write_text('{"state": "patched", "reason": ')  # cut short
    assert status(package_dir, tmp_path / "cache")[0] == expected
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    assert status(package_dir, not_a_directory)[0] == expected


def test_an_empty_variable_turns_the_cache_off(release, tmp_path):
    package_dir = release("0.17.1")
    result = run_cli(
        "--vllm-dir", str(package_dir), "status", "--json", env={"VLLM_EAGLE3_PATCH_VERDICT_CACHE": ""}, cwd=tmp_path
    )
    assert result.returncode == 0 and json.loads(result.stdout)["state"] == "unpatched"
    assert not list(tmp_path.rglob("*.json"))
    _, imports = status(package_dir, "")
    assert "libcst" in imports


class CountingPatch:
    """A stand-in patch that counts how often it is really asked."""

    name = "counting"
    cache_key = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def examine(self, source, release, options):
        self.calls += 1
        release.read("beside.py")
        return Verdict(State.UNPATCHED, f"patchable ({len(source)} chars)")


def test_the_key_holds_the_tool_source_the_text_and_the_options(tmp_path):
    patch = CountingPatch()
    beside = {"beside.py": "x = 1\n"}
    release = Release(tmp_path, lambda relative: beside.get(relative))

    def ask(fingerprint: str, source: str = "a = 1\n", options: Options = Options()) -> Verdict:
        return StateCache(tmp_path, lambda: fingerprint).examine(patch, source, release, options)

    assert ask("tool-1") == Verdict(State.UNPATCHED, "patchable (6 chars)")
    assert ask("tool-1") == Verdict(State.UNPATCHED, "patchable (6 chars)") and patch.calls == 1
    ask("tool-2")  # a new release of this tool, or of LibCST
    ask("tool-1", source="a = 2\n")
    ask("tool-1", options=Options(aux_layers=(1, 2, 3)))
    assert patch.calls == 4
    beside["beside.py"] = "x = 2\n"
    ask("tool-1")
    assert patch.calls == 5


@pytest.mark.unit
def test_a_cached_discovery_keeps_apart_two_families_of_one_name():
    """``mixtral.py`` and ``mixtral_quant.py`` both hold a ``MixtralForCausalLM``: read back from the cache, each
    architecture, wrapper and ``forward_from`` is the family of its own file (a name would pick one for both)."""
    name = "MixtralForCausalLM"
    plain = Family(name, "model_executor/models/mixtral.py", "MixtralModel", name, ("x",))
    quant = replace(plain, path="model_executor/models/mixtral_quant.py", forward_from=plain)
    wrapper = FoundWrapper(Wrapper("model_executor/models/toy_vl.py", "ToyVL"), "MixtralForCausalLM", plain)
    found = Discovery(
        (plain, quant), {"MixtralForCausalLM": plain, "QuantMixtralForCausalLM": quant}, wrappers={"ToyVL": wrapper}
    )
    back = decoder(())(json.loads(json.dumps(encode(found))))
    assert back.architectures["MixtralForCausalLM"].path.endswith("/mixtral.py")
    assert back.architectures["QuantMixtralForCausalLM"].path.endswith("/mixtral_quant.py")
    assert back.architectures["QuantMixtralForCausalLM"].forward_from.path.endswith("/mixtral.py")
    assert back.wrappers["ToyVL"].family.path.endswith("/mixtral.py")
    assert back == found


def test_the_layouts_a_command_keeps_are_what_parsing_gives_and_a_later_diff_writes_the_same(release, tmp_path):
    """``status`` keeps where the statements of each file it laid out lie (by the digest of its text); a later
    ``diff`` of another tree of the release takes them instead of parsing, and writes exactly what a ``diff``
    that parsed every file writes.  Damaged, they are not used."""
    cache = tmp_path / "cache"
    package_dir = release("0.34.0")
    status(package_dir, cache)
    (kept,) = cache.glob("layouts-*.json")
    encoded = json.loads(kept.read_text())
    sources = {source_digest(text): text for text in (p.read_text() for p in package_dir.rglob("*.py"))}
    assert len(encoded) > 200 and set(encoded) <= set(sources)
    layouts = Layouts(lambda: encoded)
    for digest in encoded:  # a class no command has read yet is kept without its body, read when asked for
        source = sources[digest]
        lines = source_lines(source)
        bodies = [
            layouts.body(source, lines, span) if isinstance(span, ClassSpan) else span for span in layouts.of(source)
        ]
        whole = layout_of(python_tree(source))
        assert bodies == [span.body if isinstance(span, ClassSpan) else span for span in whole]
    env = {"VLLM_EAGLE3_PATCH_VERDICT_CACHE": str(cache)}
    taken = run_cli("--vllm-dir", str(release("0.34.0")), "diff", env=env)
    parsed = run_cli("--vllm-dir", str(release("0.34.0")), "diff", env={"VLLM_EAGLE3_PATCH_VERDICT_CACHE": ""})
    assert taken.returncode == parsed.returncode == 0 and taken.stdout == parsed.stdout and taken.stdout
    kept.write_text("[not a dict]")
    assert run_cli("--vllm-dir", str(package_dir), "diff", env=env).stdout == parsed.stdout
