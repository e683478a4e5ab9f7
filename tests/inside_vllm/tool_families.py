"""What this tool patches on the tree under test, as the outer suite hands it over: this interpreter may not
import the tool, so ``tests/helpers/inner_suite.py`` writes the catalog's families, those the tool finds by
rule on this tree, the model types its gate admits and the entries the release's own (unpatched) gate matched
as JSON into ``VLLM_EAGLE3_PATCH_FAMILIES``.  The tests read them here rather than keep a copy of the catalog or
of a release's whitelist by hand."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

VARIABLE = "VLLM_EAGLE3_PATCH_FAMILIES"


@dataclass(frozen=True)
class ToolFamily:
    """One family of the tool's: its decoder (``model`` in ``module``) and the causal LM the runner holds."""

    module: str
    model: str
    causal_lm: str
    model_types: tuple[str, ...]
    found_by_rule: bool
    """Found by the tool's rule on this tree, not listed in its catalog."""

    @property
    def name(self) -> str:
        """The module's own name (``gemma3``): how the tests call the family."""
        return self.module.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ToolWrapper:
    """A multimodal class the tool found by rule: ``attribute`` holds its language model (``language_model``, a
    class name, or the checkpoint's), which the class hands EAGLE-3 on to, or acts on where it is ``bare``."""

    module: str
    cls: str
    attribute: str
    language_model: str
    bare: bool
    chosen_by_checkpoint: bool


@dataclass(frozen=True)
class RefusedWrapper:
    """A multimodal class the tool refuses because vLLM's proposer could not take the token embedding from the
    language model its ``forward`` runs (``language_model`` in ``language_model_module``, held in ``attribute``)."""

    module: str
    cls: str
    attribute: str
    language_model: str
    language_model_module: str


@dataclass(frozen=True)
class AnsweringWrapper(RefusedWrapper):
    """A multimodal class the tool serves whose language model has no ``model`` of its own: the patched file gives
    it a read-only ``model`` answering itself, where vLLM's proposer takes the embedding (built in ``embedding``)."""

    embedding: str = "embed_tokens"


@dataclass(frozen=True)
class ToolFamilies:
    families: tuple[ToolFamily, ...]
    gated_model_types: tuple[str, ...]
    """Every model type the tool's speculative-config gate admits for its catalog's families."""
    accepted_before: tuple[str, ...]
    """The entries of the release's own gate, unpatched (its whitelist, or 0.8.5-0.10.0's ``"llama"``): a model
    type containing one is accepted, before the patch and after it."""
    wrappers: tuple[ToolWrapper, ...] = ()
    refused_wrappers: tuple[RefusedWrapper, ...] = ()
    answering_wrappers: tuple[AnsweringWrapper, ...] = ()

    def named(self, name: str) -> ToolFamily | None:
        """The family of module ``name`` (the catalog's first, as the tool's plan ranks them), if any."""
        return next((family for family in self.families if family.name == name), None)

    @property
    def registered(self) -> tuple[ToolFamily, ...]:
        return tuple(family for family in self.families if not family.found_by_rule)


def load() -> ToolFamilies:
    """The data the outer suite set, or a usage error saying how to set it."""
    if VARIABLE not in os.environ:
        raise RuntimeError(
            f"{VARIABLE} is not set: the outer suite sets it (tests/helpers/inner_suite.py); by hand, "
            f'{VARIABLE}="$(PYTHONPATH=tests python -m helpers.inner_suite <vllm dir>)"'
        )
    data = json.loads(os.environ[VARIABLE])
    families = tuple(
        ToolFamily(f["module"], f["model"], f["causal_lm"], tuple(f["model_types"]), f["found_by_rule"])
        for f in data["families"]
    )
    wrappers = tuple(ToolWrapper(**w) for w in data.get("wrappers", ()))
    refused = tuple(RefusedWrapper(**w) for w in data.get("refused_wrappers", ()))
    answering = tuple(AnsweringWrapper(**w) for w in data.get("answering_wrappers", ()))
    gated, accepted = tuple(data["gated_model_types"]), tuple(data["accepted_before"])
    return ToolFamilies(families, gated, accepted, wrappers, refused, answering)
