"""The classification every codemod shares: marked, native, patchable or unrecognised."""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from ..eagle3.python_layout import Layouts
from ..eagle3.release import GETTERS
from .cst_tools import cst, has_mark, has_method, is_name, parse, top_level_class
from .outline import Keep, KeepClass, ReadsStatement, Sees, SeesStatement, Statement, outline
from .patch import State, Unrecognised, Verdict


class ModuleCodemod(Protocol):
    """A LibCST codemod over one module, as in ``patches/``.

    Deliberately not a ``libcst.codemod.Codemod``: importing ``libcst.codemod`` pulls in
    ``libcst.matchers`` (a quarter of a second, more than ``status`` may take in all).
    The tests wrap these in ``Codemod`` to use LibCST's ``CodemodTest``.
    """

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """The patched module; raises :class:`Unrecognised` where the expected structure is missing."""


NativeCheck = Callable[["cst.Module"], Optional[str]]
"""Returns why the module already does the job itself, or None."""


def judge(
    source: str,
    make_codemod: Callable[[], ModuleCodemod],
    native: NativeCheck,
    preconditions: Callable[[], object] = lambda: None,
    reads: Keep = lambda function: True,
    classes: Optional[KeepClass] = None,
    sees: Optional[Sees] = None,
    layouts: Optional[Layouts] = None,
    sees_statement: Optional[SeesStatement] = None,
    reads_statement: Optional[ReadsStatement] = None,
) -> Verdict:
    """Run ``make_codemod``'s codemod on ``source`` and say what the file is.

    A file carrying this tool's marker is patched; otherwise a file the codemod cannot
    find its way through is unsupported, with the codemod's reason.  ``preconditions``
    raises :class:`Unrecognised` when the rest of the release rules the patch out.
    ``reads`` names the functions whose bodies the codemod and ``native`` look at; the
    others are set aside unparsed (see :mod:`~vllm_eagle3_patch.codemod.outline`), and so are the module-level
    classes ``classes`` rejects (None: every class is looked at) and the functions ``sees`` rejects,
    signature and all (None: every function's is), and the other statements ``sees_statement`` rejects (imports,
    class attributes; None: every one is), and the statements of an ``__init__`` read that ``reads_statement``
    rejects (None: every one is read).  ``layouts``: the release's, which may know the file already.
    """
    if has_mark(source):
        return Verdict(State.PATCHED, "carries the vllm-eagle3-patch changes")
    parsed = outline(source, reads, classes, sees, layouts, sees_statement, reads_statement)
    try:
        module = parse(parsed.text)
        why_native = native(module)
        if why_native:
            return Verdict(State.NATIVE, why_native)
        preconditions()
        patched = make_codemod().transform_module(module)
    except Unrecognised as error:
        return Verdict(State.UNSUPPORTED, str(error))
    return Verdict(State.UNPATCHED, "patchable", patched, parsed)


def implements_eagle3(module: cst.Module, class_name: str) -> Optional[str]:
    """Native when the class already has a getter of the default ids (upstream's, 0.18.0 on)."""
    cls = top_level_class(module, class_name)
    if any(has_method(cls, getter) for getter in GETTERS):
        return f"{class_name} already implements EAGLE-3 (upstream support)"
    return None


def declares_eagle3(module: cst.Module, class_name: str, bases: tuple[str, ...]) -> Optional[str]:
    """Native when the class has the getter, or lists one of ``bases`` (``SupportsEagle3``,
    ``EagleModelMixin``) itself."""
    cls = top_level_class(module, class_name)
    if any(is_name(base.value, *bases) for base in cls.bases):
        return f"{class_name} already implements EAGLE-3 (upstream support)"
    return implements_eagle3(module, class_name)


def reads_the_interfaces_import(statement: Statement) -> bool:
    """Of a model file's imports, the one a codemod adding ``SupportsEagle3`` reads: the model files' interfaces,
    which ``cst_tools.add_import`` extends (the others are set aside, and a new import still follows the last)."""
    return statement.kind == "import" and "interfaces" in statement.text
