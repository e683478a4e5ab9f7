"""Every decoder that ``apply`` patches or exposes hands the drafter the stream as it was (issue: states that
alias a tensor a later layer writes into), on 0.17.1, 0.21.0 and 0.33.0.

The architectures come from the tool's own plan of the patched tree: the catalog's families and every one
found by rule whose file ``apply`` patched.  The inner module (``tests/inside_vllm/test_every_target.py``) runs
each decoder's real ``forward`` over stand-in layers that write into their inputs once read.  With the copies
taken out of the patched files (every capture then keeps the bare tensor, as before the fix), every decoder
must fail it.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from helpers import environments
from helpers.cli import run_on
from helpers.inner_suite import families_of, run_inside

from vllm_eagle3_patch.codemod.patch import State
from vllm_eagle3_patch.eagle3.release import module_name
from vllm_eagle3_patch.install.locate import from_package_dir
from vllm_eagle3_patch.plan import make_plan

RELEASES = {
    "0.17.1": lambda: environments.engine_python("2.10.0"),  # Qwen3.5's file imports torchvision
    "0.21.0": lambda: environments.engine_python("2.10.0"),  # its config imports the OpenAI server's modules
    "0.33.0": environments.modern_python,
}
SUITE = "test_every_target.py"


def patched_decoders(package_dir: Path) -> list[dict]:
    """The decoder classes of the families whose files ``apply`` patched, one entry per class."""
    plan = make_plan(from_package_dir(package_dir), states_only=True)
    patched = {f.path for f in plan.files if f.state is State.PATCHED}
    decoders: dict[tuple[str, str], dict] = {}
    for family in families_of(plan):
        if family.path in patched:
            entry = decoders.setdefault(
                (family.path, family.model),
                {"module": module_name(family.path), "model": family.model, "architectures": []},
            )
            entry["architectures"].append(family.causal_lm)
    return list(decoders.values())


def run_suite(python: Path, package_dir: Path, decoders_file: Path) -> tuple[str, dict[str, str]]:
    """The inner module over the decoders listed, and each decoder's outcome (passed, failed, skipped)."""
    report = decoders_file.with_suffix(".xml")
    env = {"VLLM_EAGLE3_PATCH_DECODERS": str(decoders_file)}
    inner = run_inside(python, package_dir, f"--junitxml={report}", suite=SUITE, env=env)
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        model = re.search(r"\[(\w+)\]", case.get("name", "")).group(1)  # type: ignore[union-attr]
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[model] = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    return inner.stdout[-8000:] + inner.stderr[-2000:], outcomes


@pytest.mark.parametrize("version", RELEASES)
def test_every_patched_decoder_hands_the_drafter_the_stream_as_it_was(version, release, tmp_path):
    package_dir = release(version)
    assert run_on(package_dir, "apply").returncode == 0
    decoders = patched_decoders(package_dir)
    assert len(decoders) >= 40, decoders  # the rule's families, not the hand-kept ones only
    listed = tmp_path / "decoders.json"
    listed.write_text(json.dumps(decoders))
    python = RELEASES[version]()
    output, outcomes = run_suite(python, package_dir, listed)
    assert set(outcomes) == {d["model"] for d in decoders}, output
    assert {m for m, outcome in outcomes.items() if outcome == "failed"} == set(), output
    skipped = {m for m, outcome in outcomes.items() if outcome == "skipped"}
    assert len(skipped) <= 1, f"{sorted(skipped)} do not import in this interpreter: {output}"

    for decoder in decoders:  # the copies taken out: every capture keeps the bare tensor again
        path = package_dir / (decoder["module"].removeprefix("vllm.").replace(".", "/") + ".py")
        path.write_text(path.read_text().replace("hidden_states.clone()", "hidden_states"))
    _, mutated = run_suite(python, package_dir, listed)
    assert {m for m, outcome in mutated.items() if outcome == "failed"} == set(outcomes) - skipped, mutated
