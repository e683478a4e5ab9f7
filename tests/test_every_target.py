"""Every decoder that ``apply`` patches or exposes hands the drafter the stream as it was (issue: states that
alias a tensor a later layer writes into), on 0.17.1 and 0.33.0 in CI, and 0.21.0 with
``VLLM_EAGLE3_PATCH_RELEASES=all``.

The architectures come from the tool's own plan of the patched tree: the catalog's families and every one
found by rule whose file ``apply`` patched.  The inner module (``tests/inside_vllm/test_every_target.py``) runs
each decoder's real ``forward`` over stand-in layers that write into their inputs once read.  With the copies
taken out of the patched files (every capture then keeps the bare tensor, as before the fix), every decoder
must fail it.
"""

from __future__ import annotations

import json

import pytest
from helpers import environments
from helpers.cli import run_on
from helpers.inner_suite import case_id, patched_decoders
from helpers.inner_suite import outcomes as suite_outcomes
from helpers.selection import release_param

from vllm_eagle3_patch.eagle3.modules import path_of

RELEASES = {
    "0.17.1": lambda: environments.engine_python("2.10.0"),  # Qwen3.5's file imports torchvision
    "0.21.0": lambda: environments.engine_python("2.10.0"),  # its config imports the OpenAI server's modules
    "0.33.0": environments.modern_python,
}
SUITE = "test_every_target.py"


@pytest.mark.parametrize("version", [release_param(v, v != "0.21.0") for v in RELEASES])
def test_every_patched_decoder_hands_the_drafter_the_stream_as_it_was(version, release, tmp_path):
    package_dir = release(version)
    assert run_on(package_dir, "apply").returncode == 0
    decoders = patched_decoders(package_dir)
    assert len(decoders) >= 40, decoders  # the rule's families, not the hand-kept ones only
    listed = tmp_path / "decoders.json"
    listed.write_text(json.dumps(decoders))
    python = RELEASES[version]()
    output, outcomes = suite_outcomes(python, package_dir, listed, SUITE)
    assert set(outcomes) == {case_id(d) for d in decoders}, output
    assert {m for m, outcome in outcomes.items() if outcome == "failed"} == set(), output
    skipped = {m for m, outcome in outcomes.items() if outcome == "skipped"}
    assert len(skipped) <= 1, f"{sorted(skipped)} do not import in this interpreter: {output}"

    for decoder in decoders:  # the copies taken out: every capture keeps the bare tensor again
        path = package_dir / path_of(decoder["module"].removeprefix("vllm."))
        path.write_text(path.read_text().replace("hidden_states.clone()", "hidden_states"))
    _, mutated = suite_outcomes(python, package_dir, listed, SUITE)
    assert {m for m, outcome in mutated.items() if outcome == "failed"} == set(outcomes) - skipped, mutated
