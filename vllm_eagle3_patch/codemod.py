"""The classification every patch module shares: marked, native, patchable or unrecognised."""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst
from libcst.codemod import Codemod

from .cst_tools import has_mark, has_method, parse, top_level_class
from .target import State, Unrecognised, Verdict

NativeCheck = Callable[[cst.Module], Optional[str]]
"""Returns why the module already does the job itself, or None."""


def judge(
    source: str,
    make_codemod: Callable[[], Codemod],
    native: NativeCheck,
    preconditions: Callable[[], None] = lambda: None,
) -> Verdict:
    """Run ``make_codemod``'s codemod on ``source`` and say what the file is.

    A file carrying this tool's marker is patched; otherwise a file the codemod cannot
    find its way through is unsupported, with the codemod's reason.  ``preconditions``
    raises :class:`Unrecognised` when the rest of the release rules the patch out.
    """
    if has_mark(source):
        return Verdict(State.PATCHED, "carries the vllm-eagle3-patch changes")
    try:
        module = parse(source)
        why_native = native(module)
        if why_native:
            return Verdict(State.NATIVE, why_native)
        preconditions()
        # transform_module_impl, not transform_module: the codemods use no metadata, and the
        # wrapper transform_module builds for it deep-copies the whole module first.
        patched = make_codemod().transform_module_impl(module).code
    except Unrecognised as error:
        return Verdict(State.UNSUPPORTED, str(error))
    compile(patched, "<patched>", "exec")  # a codemod bug must never reach a user's disk
    return Verdict(State.UNPATCHED, "patchable", patched)


def implements_eagle3(module: cst.Module, class_name: str) -> Optional[str]:
    """Native when the class already has the getter upstream added in 0.18.0."""
    if has_method(top_level_class(module, class_name), "get_eagle3_aux_hidden_state_layers"):
        return f"{class_name} already implements EAGLE-3 (upstream support)"
    return None
