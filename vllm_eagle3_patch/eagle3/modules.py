"""Module names and the files under ``vllm/`` that hold them: the one conversion between the two.

The registry names modules (``llama``, or ``vllm.models.x`` from 0.30), a class's chain names them from
``vllm/`` (``model_executor.models.llama``), the target interpreter imports them (``vllm.model_executor...``),
and the tree is read by path.  Every module of this tool turns one into another here.
"""

from __future__ import annotations

import re

MODELS = "model_executor/models"
"""The model files' directory, relative to ``vllm/``."""
MODELS_MODULE = MODELS.replace("/", ".")
"""... as a module of ``vllm``: where the registry's bare module names live (``llama``)."""


def module_of(path: str) -> str:
    """A file of ``vllm/`` as the chains name its module: ``model_executor/models/llama.py`` ->
    ``model_executor.models.llama``; a package's ``__init__.py`` is the package."""
    return re.sub(r"(/__init__)?\.py$", "", path).replace("/", ".")


def import_name(path: str) -> str:
    """A file of ``vllm/`` as Python imports it: ``model_executor/models/gemma3.py`` ->
    ``vllm.model_executor.models.gemma3``."""
    return f"vllm.{module_of(path)}"


def path_of(module: str, package: bool = False) -> str:
    """A module named from ``vllm/`` as its file: ``model_executor.models.llama`` ->
    ``model_executor/models/llama.py`` (``.../llama/__init__.py`` where it is a package)."""
    return module.replace(".", "/") + ("/__init__.py" if package else ".py")


def registry_module(module: str) -> str:
    """The registry's module name as a module named from ``vllm/``: ``llama`` or ``vllm.models.beam``."""
    return module.removeprefix("vllm.") if module.startswith("vllm.") else f"{MODELS_MODULE}.{module}"
