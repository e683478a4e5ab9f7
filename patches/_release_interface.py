"""What a release's runner asks of an EAGLE-3 target, read from its own files (never its version).

Three shapes, told apart by structure:

- 0.8.5-0.10.0: no ``SupportsEagle3``; the runner calls ``set_aux_hidden_state_layers`` and
  ``get_eagle3_aux_hidden_state_layers`` by name.
- 0.10.1-0.17.x: the same two methods, behind the ``SupportsEagle3`` protocol.
- 0.18.0 and later: ``SupportsEagle3`` builds on ``EagleModelMixin`` and the runner asks
  ``get_eagle3_default_aux_hidden_state_layers``.  The protocol's own default methods expect
  an ``EagleModelMixin`` decoder and give ``(2, n // 2, n - 3)`` for every size, so the
  patched model overrides both, under the name the runner asks for.

A class this tool writes must carry exactly the method names its release calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_eagle3_patch.patches._eagle3_methods import DEFAULT_GETTER, GETTER
from vllm_eagle3_patch.target import ReadFile, Unrecognised

INTERFACES = "model_executor/models/interfaces.py"
RUNNER = "v1/worker/gpu_model_runner.py"
PROTOCOL = "SupportsEagle3"
SETTER = "set_aux_hidden_state_layers"


@dataclass(frozen=True)
class Eagle3Interface:
    """The release's EAGLE-3 contract with a target model."""

    protocol: bool = True
    """Whether ``SupportsEagle3`` exists: the causal LM must list it among its bases."""
    getter: str = GETTER
    """The name under which the runner asks for the default aux layer ids."""


def release_interface(read: ReadFile) -> Eagle3Interface:
    """The contract of the release ``read`` reads from; :class:`Unrecognised` if it has no EAGLE-3."""
    runner = read(RUNNER) or ""
    if SETTER not in runner:
        raise Unrecognised(f"this vLLM has no EAGLE-3 ({RUNNER} never calls {SETTER})")
    getter = DEFAULT_GETTER if DEFAULT_GETTER in runner else GETTER
    return Eagle3Interface(protocol=_has_protocol(read), getter=getter)


def _has_protocol(read: ReadFile) -> bool:
    return re.search(rf"^class {PROTOCOL}\b", read(INTERFACES) or "", re.MULTILINE) is not None
