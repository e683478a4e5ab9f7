"""What an installed vLLM release does with a drafter, read from its own files (never imported).

Reading the release's registry and runner keeps the answers true for releases this tool
has never seen, where a version table would have to be guessed.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .layer_ids import FIELD

REGISTRY = "model_executor/models/registry.py"
EAGLE_CONFIG = "transformers_utils/configs/eagle.py"
PROPOSER = "v1/spec_decode/eagle.py"
RUNNER = "v1/worker/gpu_model_runner.py"
FIXED_DRAFTER = "Eagle3LlamaForCausalLM"


class Lookup(enum.Enum):
    """How a release turns a drafter's ``architectures[0]`` into the class it loads for EAGLE-3."""

    FIXED = "the proposer builds Eagle3LlamaForCausalLM whatever the config says"  # 0.8.5
    PREFIX = "EAGLEConfig renames X to Eagle3X unless X starts with Eagle3"  # 0.9.0 - 0.10.0
    PREFIX_OR_SUFFIX = "EAGLEConfig renames X to Eagle3X unless X starts or ends with Eagle3"  # 0.10.1+

    def looked_up(self, architecture: str) -> str:
        if self is Lookup.FIXED:
            return FIXED_DRAFTER
        keep = architecture.startswith("Eagle3") or (self is Lookup.PREFIX_OR_SUFFIX and architecture.endswith("Eagle3"))
        return architecture if keep else f"Eagle3{architecture}"


@dataclass(frozen=True)
class ReleaseFacts:
    registered: frozenset[str]
    """Architecture names in the release's model registry (commented-out entries excluded)."""
    lookup: Optional[Lookup]
    """None: the release has no EAGLE-3 drafter loading this tool recognises."""
    reads_drafter_ids: bool
    """Whether the runner reads a drafter's top-level ``eagle_aux_hidden_state_layer_ids`` (0.11.1+)."""


def read_release(package_dir: Path) -> ReleaseFacts:
    return ReleaseFacts(
        registered=registered_architectures(_read(package_dir, REGISTRY)),
        lookup=_lookup(_read(package_dir, EAGLE_CONFIG), _read(package_dir, PROPOSER)),
        reads_drafter_ids=reads_drafter_ids(package_dir),
    )


def reads_drafter_ids(package_dir: Path) -> bool:
    """Whether the runner takes the drafter's top-level ids over the target's (0.11.1 on)."""
    return FIELD in _read(package_dir, RUNNER)


def registered_architectures(source: str) -> frozenset[str]:
    """Keys of the registry's dict literals mapping a name to ``(module, class)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple):
                    names.add(key.value)
    return frozenset(names)


def _lookup(eagle_config: str, proposer: str) -> Optional[Lookup]:
    if 'endswith("Eagle3")' in eagle_config:
        return Lookup.PREFIX_OR_SUFFIX
    if 'f"Eagle3{arch}"' in eagle_config:
        return Lookup.PREFIX
    if f"{FIXED_DRAFTER}(" in proposer:
        return Lookup.FIXED
    return None


def _read(package_dir: Path, relative: str) -> str:
    try:
        return (package_dir / relative).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
