"""Which files of a release vLLM itself gives EAGLE-3, read from the wheel's own source with ``ast``.

The release tests compare the tool's ``native`` verdicts with this, so it must not be the tool's judgment
(which also follows the decoder's loop): it keeps to what a file states outright.  A file is vLLM's own
EAGLE-3 when the class the runner holds (a family's causal LM, or its multimodal wrapper) names the protocol
among its bases, directly or through a class of the same file.  A decoder that already collects under a
causal LM without the protocol is not enough: the runner never asks that model for ids, so the tool patches it.
"""

from __future__ import annotations

import ast
from typing import Optional

from vllm_eagle3_patch.codemod.family import Family, Wrapper
from vllm_eagle3_patch.eagle3.release import PROTOCOL


def runner_classes(families: tuple[Family, ...], wrappers: tuple[Wrapper, ...] = ()) -> dict[str, str]:
    """Each file of ``families`` and ``wrappers`` (relative to ``vllm/``) and the class in it that the runner holds."""
    return {**{family.path: family.causal_lm for family in families}, **{w.path: w.cls for w in wrappers}}


def declares_eagle3(source: Optional[str], cls: str) -> bool:
    """Whether class ``cls`` of ``source`` names ``SupportsEagle3`` among its bases, or inherits a class of
    ``source`` that does (False: no such class, or no such file)."""
    if source is None:
        return False
    bases = {
        node.name: [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }
    seen, pending = set(), [cls]
    while pending:
        name = pending.pop()
        if name == PROTOCOL:
            return True
        if name not in seen:
            seen.add(name)
            pending.extend(bases.get(name, ()))
    return False
