"""A family's multimodal wrapper becomes an EAGLE-3 target (Gemma 3's, Kimi-K2.5's).

The model runner asks ``supports_eagle3(get_model())``, and for a multimodal checkpoint that
is the wrapper, not the language model inside.  The wrapper gains ``SupportsEagle3`` (where
the release has it) and both methods, under the names the release's runner calls:

- handed on to the language model, a causal LM that the family's patch gives both methods
  (``init_vllm_registered_model(...)`` or the family's causal LM: Gemma 3, Kimi-K2.5 from 0.16.0);
- acting on it directly where ``__init__`` builds the family's bare model
  (``self.language_model = DeepseekV2Model(...)``: Kimi-K2.5 on 0.15.x), as the causal LM's do
  on ``self.model``.

It is patched only where the family's model file is patchable (the methods rely on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    add_base,
    add_import,
    add_methods,
    assigned,
    cst,
    exactly_one,
    find_statements,
    is_name,
    is_self_attribute,
    method,
    replace_child,
    sole_statement,
    top_level_class,
)
from vllm_eagle3_patch.codemod.family import Family, FoundWrapper, Wrapper
from vllm_eagle3_patch.codemod.judge import declares_eagle3, judge
from vllm_eagle3_patch.codemod.patch import Options, Policy, SingleFilePatch, Unrecognised, Verdict
from vllm_eagle3_patch.eagle3.release import GETTER, GETTERS, PACKAGE, PROTOCOL, Release
from vllm_eagle3_patch.patches.decoder_eagle3 import require_patchable
from vllm_eagle3_patch.patches.eagle3_methods import checked_delegating_methods, delegating_methods, eagle3_methods
from vllm_eagle3_patch.patches.pipeline_relay import MIXIN_RELAYS, NO_RELAY
from vllm_eagle3_patch.patches.shared_embedding import answer_model_with_itself


@dataclass(frozen=True)
class WrapperEagle3:
    """Give a multimodal wrapper ``SupportsEagle3`` and both methods, for its language model.

    ``bare_model``: the family's model class, which the wrapper may build as its language model
    itself (then the methods act on it); ``aux_layers``: fixed ids for that case's getter.
    """

    wrapper: Wrapper
    bare_model: str
    protocol: bool = True
    getter: str = GETTER
    aux_layers: Optional[tuple[int, ...]] = None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        cls = top_level_class(tree, self.wrapper.cls)
        inner = self.wrapper.language_model
        if _builds(cls, inner, self.bare_model):
            methods = eagle3_methods(inner, self.aux_layers, self.getter)
        else:
            methods = delegating_methods(inner, self.getter)
        return _with_protocol(replace_child(tree, cls, _give(cls, methods, tree, self.protocol)), self.protocol)


def _give(cls: cst.ClassDef, methods: str, tree: cst.Module, protocol: bool) -> cst.ClassDef:
    """``cls`` with both methods, and ``SupportsEagle3`` among its bases where the release has the protocol."""
    return add_methods(add_base(cls, PROTOCOL) if protocol else cls, methods, tree)


def _with_protocol(tree: cst.Module, protocol: bool) -> cst.Module:
    """``tree`` importing ``SupportsEagle3`` from the model files' interfaces, where the release has it."""
    return add_import(tree, f"{PACKAGE}.interfaces", PROTOCOL, PACKAGE) if protocol else tree


def _builds(cls: cst.ClassDef, attribute: str, model: str) -> bool:
    """Whether ``__init__``'s one ``<attribute> = <callee>(...)`` line builds ``model`` itself;
    a wrapper that never sets its language model there is not one this codemod knows."""
    name = attribute.removeprefix("self.")

    def sets_language_model(line: cst.SimpleStatementLine) -> bool:
        statement = sole_statement(line)
        target = assigned(statement)
        return target is not None and is_self_attribute(target, name) and isinstance(statement.value, cst.Call)  # type: ignore[union-attr]

    lines = find_statements(method(cls, "__init__"), cst.SimpleStatementLine, sets_language_model)
    line = exactly_one(lines, f"`{attribute} = ...(...)` in {cls.name.value}.__init__")
    return is_name(line.body[0].value.func, model)  # type: ignore[attr-defined]


class WrapperPatch(SingleFilePatch):
    """A family's multimodal wrapper: patched only where the family's model file is patchable."""

    def __init__(self, family: Family) -> None:
        assert family.wrapper is not None, f"{family.name} has no multimodal wrapper"
        self.family = family
        self.wrapper = family.wrapper
        self.name = f"{family.wrapper.name} wrapper" if family.wrapper.name else f"{family.name} multimodal wrapper"
        self.path = family.wrapper.path
        self.policy = family.wrapper_policy
        self.serves = family.name

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        def codemod() -> WrapperEagle3:
            interface = release.interface
            if interface is None:
                raise Unrecognised(release.no_eagle3)
            return WrapperEagle3(
                self.wrapper, self.family.model, interface.protocol, interface.getter, options.aux_layers
            )

        return judge(
            source,
            codemod,
            native=lambda module: declares_eagle3(module, self.wrapper.cls, (PROTOCOL,)),
            preconditions=lambda: require_patchable(self.family, release, options),  # the methods rely on it
            reads=lambda function: function.cls == self.wrapper.cls and function.name == "__init__",
            classes=lambda name: name == self.wrapper.cls,
            sees=lambda function: function.cls == self.wrapper.cls and function.name in ("__init__", *GETTERS),
        )


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
            if found.answers_model:  # a class of this file: Aria's AriaTextModel
                tree = answer_model_with_itself(tree, found.language_model)
        return _with_protocol(tree, self.protocol)


class FoundWrappersPatch(SingleFilePatch):
    """The multimodal classes of one file found by rule: each patched only where its language model's family
    file is patchable (the methods rely on it); a native language model, or the checkpoint's, needs none."""

    def __init__(self, path: str, wrappers: tuple[FoundWrapper, ...]) -> None:
        self.wrappers = tuple({w.wrapper.cls: w for w in wrappers}.values())
        self.path = path
        self.policy = Policy.OPTIONAL
        self.name = f"{self.wrappers[0].name} multimodal wrapper" + ("s" if len(self.wrappers) > 1 else "")
        self.serves = self.wrappers[0].name
        self.families = tuple(dict.fromkeys(w.family for w in self.wrappers if w.family is not None))

    @property
    def serves_families(self) -> tuple[str, ...]:
        return (*(w.name for w in self.wrappers), *(f.name for f in self.families))

    def examine(self, source: str, release: Release, options: Options) -> Verdict:
        classes = {w.wrapper.cls for w in self.wrappers}
        shown = {w.language_model for w in self.wrappers if w.answers_model}  # gains a read-only `model`

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
        )


def _all_declare_eagle3(module: cst.Module, classes: set[str]) -> Optional[str]:
    reasons = [declares_eagle3(module, cls, (PROTOCOL,)) for cls in sorted(classes)]
    return reasons[0] if all(reasons) else None
