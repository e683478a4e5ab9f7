"""Wrap a codemod from ``patches/`` in LibCST's ``Codemod``, so ``CodemodTest`` can drive it.

The codemods are plain classes with ``transform_module`` (see ``ModuleCodemod``): the tool
never imports ``libcst.codemod``, whose import alone would cost more than ``status`` may.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
from libcst.codemod import Codemod, CodemodContext


def as_codemod(transform: type) -> type[Codemod]:
    class Command(Codemod):
        def __init__(self, context: CodemodContext, *args: Any, **kwargs: Any) -> None:
            super().__init__(context)
            self.transform = transform(*args, **kwargs)

        def transform_module_impl(self, tree: cst.Module) -> cst.Module:
            return self.transform.transform_module(tree)

    Command.__name__ = Command.__qualname__ = f"{transform.__name__}Command"
    return Command
