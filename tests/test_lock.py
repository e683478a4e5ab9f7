"""The run lock (``install/lock.py``) when a finishing ``revert`` removes the state directory under a waiter."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vllm_eagle3_patch.install.lock import held, locked

pytestmark = pytest.mark.unit  # no release tree, no interpreter


@dataclass
class VanishingStateDir:
    """A state directory that a concurrent ``revert`` removes right after the waiter made it, ``removals`` times."""

    path: Path
    removals: int = 1
    made: list[bool] = field(default_factory=list)

    def make(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.made.append(True)
        if self.removals:
            self.removals -= 1
            shutil.rmtree(self.path)


def test_a_waiter_whose_state_directory_vanishes_makes_it_again_and_takes_the_lock(tmp_path):
    state_dir = VanishingStateDir(tmp_path / ".vllm-eagle3-patch", removals=2)
    with locked(state_dir):
        assert held(state_dir.path)
        assert (state_dir.path / "lock").is_file()
    assert len(state_dir.made) == 3 and not held(state_dir.path)
