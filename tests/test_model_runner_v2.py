"""Model runner V2's own EAGLE-3 code wires the decoders ``apply`` patches (issue 39.6).

A GPU user gets V2 by default from 0.29.0, and only V2 from 0.34.0; no engine here runs it (vLLM's CPU platform
runs V1, and V2 needs Triton: docs/engine.md).  So the inner suite (``tests/inside_vllm/test_model_runner_v2.py``)
imports the helper V2 wires EAGLE-3 with, the file this tool found calling ``set_aux_hidden_state_layers`` under
V2's package, and lets it hand ids to every decoder ``apply`` patched, over in-place stand-in layers: from a
drafter's config and from the patched getter.  Unpatched, V2's own ``supports_eagle3`` check refuses the models.
0.34.0 runs in CI; ``VLLM_EAGLE3_PATCH_RELEASES=all`` adds 0.30.0 (the first release carrying aux states over
pipeline ranks) and 0.33.0 (the last with a V1 runner beside V2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import run_on
from helpers.inner_suite import case_id, outcomes, patched_decoders
from helpers.selection import release_param

from vllm_eagle3_patch.eagle3.modules import import_name
from vllm_eagle3_patch.eagle3.release import V2_PACKAGE, Release

SUITE = "test_model_runner_v2.py"
CI_RELEASES = ("0.34.0",)


def v2_release(version: str):
    return release_param(version, version in CI_RELEASES)


def v2_helper(package_dir: Path) -> str:
    """The module of V2's EAGLE-3 call site, as the tool found it in the tree."""
    interface = Release(package_dir).interface
    assert interface is not None
    (path,) = [p for p in interface.runners if p.startswith(V2_PACKAGE)]
    return import_name(path)


@pytest.mark.parametrize("version", [v2_release(v) for v in ("0.30.0", "0.33.0", "0.34.0")])
def test_model_runner_v2_wires_every_patched_decoder(version: str, release, modern_python, tmp_path: Path) -> None:
    """Every patched decoder passes the in-place check (``tests/inside_vllm/test_every_target.py``, on the same tree)
    and then V2's wiring; a platform variant whose module imports only on its platform (Step5's AMD one) is skipped
    there, with its reason."""
    package_dir = release(version)
    listed = tmp_path / "decoders.json"
    assert run_on(package_dir, "apply").returncode == 0
    decoders = patched_decoders(package_dir)
    assert len(decoders) >= 40, decoders
    listed.write_text(json.dumps(decoders))
    stand_in_output, stand_ins = outcomes(modern_python, package_dir, listed, "test_every_target.py")
    assert "failed" not in stand_ins.values(), stand_in_output
    runnable = [d for d in decoders if stand_ins.get(case_id(d)) == "passed"]
    assert len(runnable) >= len(decoders) - 2, stand_in_output  # a CUDA-only module may not import on CPU
    listed.write_text(json.dumps(runnable))
    env = {"VLLM_EAGLE3_PATCH_V2_RUNNER": v2_helper(package_dir)}
    output, wired = outcomes(modern_python, package_dir, listed, SUITE, env)
    assert len(wired) == len(runnable) and set(wired.values()) == {"passed"}, output

    mixtral = next(d for d in decoders if d["model"] == "MixtralModel")
    listed.write_text(json.dumps([mixtral]))
    assert run_on(package_dir, "revert").returncode == 0  # unpatched: V2's own check refuses the model
    refused, _ = outcomes(modern_python, package_dir, listed, SUITE, env)
    assert "Model does not support EAGLE3 interface" in refused, refused
