"""The multimodal classes found by rule (``multimodal.py``) become EAGLE-3 targets: Kimi-K2.5's, Gemma 3's, LLaVA's...

The model runner asks ``supports_eagle3(get_model())``, and for a multimodal checkpoint that
is the wrapper, not the language model inside.  The wrapper gains ``SupportsEagle3`` (where
the release has it) and both methods, under the names the release's runner calls:

- handed on to the language model, a causal LM that is native or that a family's patch gives both
  methods (``init_vllm_registered_model(...)`` or a causal LM class);
- acting on it directly where ``__init__`` builds a bare model (``self.language_model =
  DeepseekV2Model(...)``), as the causal LM's do on ``self.model``;
- handed on with a clear error where the checkpoint names the language model, for one that lacks EAGLE-3.

A file is patched only where the families of its language models are patchable (the methods rely on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    add_base,
    add_import,
    add_methods,
    cst,
    replace_child,
    top_level_class,
)
from vllm_eagle3_patch.codemod.family import FoundWrapper
from vllm_eagle3_patch.codemod.judge import declares_eagle3, judge, reads_the_interfaces_import
from vllm_eagle3_patch.codemod.patch import Options, Policy, SingleFilePatch, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.release import GETTER, GETTERS, PACKAGE, PROTOCOL, Release
from vllm_eagle3_patch.patches.decoder_eagle3 import require_patchable
from vllm_eagle3_patch.patches.eagle3_methods import checked_delegating_methods, delegating_methods, eagle3_methods
from vllm_eagle3_patch.patches.pipeline_relay import MIXIN_RELAYS, NO_RELAY
from vllm_eagle3_patch.patches.shared_embedding import answer_model_with_itself


def _give(cls: cst.ClassDef, methods: str, tree: cst.Module, protocol: bool) -> cst.ClassDef:
    """``cls`` with both methods, and ``SupportsEagle3`` among its bases where the release has the protocol."""
    return add_methods(add_base(cls, PROTOCOL) if protocol else cls, methods, tree)


def _with_protocol(tree: cst.Module, protocol: bool) -> cst.Module:
    """``tree`` importing ``SupportsEagle3`` from the model files' interfaces, where the release has it."""
    return add_import(tree, f"{PACKAGE}.interfaces", PROTOCOL, PACKAGE) if protocol else tree


@dataclass(frozen=True)
class FoundWrappersEagle3:
    """Give each multimodal class of a file found by rule (``multimodal.py``) ``SupportsEagle3`` and both methods:
    handed on to its language model, acting on its bare model, or, where the checkpoint names the language model,
    handed on with a clear error for one that lacks EAGLE-3; and a bare model of this file a read-only ``model``
    answering itself, where vLLM's proposer looks for the embedding (``FoundWrapper.answers_model``)."""

    wrappers: tuple[FoundWrapper, ...]
    protocol: bool = True
    getter: str = GETTER
    aux_layers: Optional[tuple[int, ...]] = None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        for found in self.wrappers:
            cls = top_level_class(tree, found.wrapper.cls)
            inner = found.wrapper.language_model
            if found.bare:
                over_ranks = MIXIN_RELAYS if found.mixin else NO_RELAY
                methods = eagle3_methods(inner, self.aux_layers, self.getter, over_ranks=over_ranks)
            elif found.chosen_by_checkpoint:
                methods = checked_delegating_methods(inner, self.getter)
            else:
                methods = delegating_methods(inner, self.getter)
            tree = replace_child(tree, cls, _give(cls, methods, tree, self.protocol))
            if found.answers_model and found.family is None:  # a class of this file: Aria's AriaTextModel
                tree = answer_model_with_itself(tree, found.language_model)
        return _with_protocol(tree, self.protocol)


class FoundWrappersPatch(SingleFilePatch):
    """The multimodal classes of one file found by rule: each patched only where its language model's family
    file is patchable (the methods rely on it); a native language model, or the checkpoint's, needs none.  A file
    serving the required family (Kimi-K2.5's, around DeepSeek-V3) must be patchable where it exists."""

    def __init__(self, path: str, wrappers: tuple[FoundWrapper, ...]) -> None:
        self.wrappers = tuple({w.wrapper.cls: w for w in wrappers}.values())
        self.path = path
        self.families = tuple(dict.fromkeys(w.family for w in self.wrappers if w.family is not None))
        required = any(family.policy is Policy.REQUIRED for family in self.families)
        self.policy = Policy.BLOCKING if required else Policy.OPTIONAL
        self.name = f"{self.wrappers[0].name} multimodal wrapper" + ("s" if len(self.wrappers) > 1 else "")
        self.serves = self.wrappers[0].name

    @property
    def serves_families(self) -> tuple[str, ...]:
        return (*(w.name for w in self.wrappers), *(f.name for f in self.families))

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        classes = {w.wrapper.cls for w in self.wrappers}
        shown = {w.language_model for w in self.wrappers if w.answers_model and w.family is None}  # gains `model`

        def codemod() -> FoundWrappersEagle3:
            interface = release.interface
            if interface is None:
                raise Unrecognised(release.no_eagle3)
            return FoundWrappersEagle3(self.wrappers, interface.protocol, interface.getter, options.aux_layers)

        def preconditions() -> None:
            for family in self.families:
                require_patchable(family, release, options)

        return judge(
            source,
            codemod,
            native=lambda module: _all_declare_eagle3(module, classes),
            preconditions=preconditions,
            reads=lambda function: False,  # the methods are handed on by what discovery found, not by __init__
            classes=lambda name: name in classes or name in shown,  # a multimodal file's towers, set aside
            sees=lambda function: function.cls in classes and function.name in GETTERS,  # the native check's
            layouts=release.layouts,
            sees_statement=reads_the_interfaces_import,  # no attribute, no other module statement
        )


def _all_declare_eagle3(module: cst.Module, classes: set[str]) -> Optional[str]:
    reasons = [declares_eagle3(module, cls, (PROTOCOL,)) for cls in sorted(classes)]
    return reasons[0] if all(reasons) else None
