"""``model_executor/models/kimi_k25.py`` (0.15.0+): the Kimi-K2.5 wrapper becomes an EAGLE-3 target.

The model runner asks ``supports_eagle3(get_model())``, and for Kimi-K2.5 that is the
multimodal wrapper ``KimiK25ForConditionalGeneration``, not the DeepSeek-V3 model inside.
The wrapper gains ``SupportsEagle3`` and both methods, handed on to ``self.language_model``:

- 0.16.0+: the language model is a ``DeepseekV2ForCausalLM`` (patched by ``deepseek_v2``),
  so the methods delegate to it;
- 0.15.x: it is a bare ``DeepseekV2Model``, so the methods act on it as
  ``DeepseekV2ForCausalLM``'s do on ``self.model``.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodCommand, CodemodContext

from vllm_eagle3_patch.codemod import implements_eagle3, judge
from vllm_eagle3_patch.cst_tools import (
    add_base,
    add_import,
    add_methods,
    method,
    only,
    replace_child,
    top_level_class,
)
from vllm_eagle3_patch.patches._eagle3_methods import delegating_methods, eagle3_methods
from vllm_eagle3_patch.target import Options, ReadFile, SingleFileTarget, Unrecognised, Verdict

PATH = "model_executor/models/kimi_k25.py"
WRAPPER = "KimiK25ForConditionalGeneration"
PROTOCOL = "SupportsEagle3"
INTERFACES = "vllm.model_executor.models.interfaces"
LANGUAGE_MODEL = "self.language_model"


class KimiK25Eagle3(CodemodCommand):
    """Give ``KimiK25ForConditionalGeneration`` the ``SupportsEagle3`` protocol by delegation."""

    def __init__(self, context: CodemodContext, aux_layers: Optional[tuple[int, ...]] = None) -> None:
        super().__init__(context)
        self.aux_layers = aux_layers

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        wrapper = top_level_class(tree, WRAPPER)
        if _builds_bare_decoder(wrapper):
            methods = eagle3_methods(LANGUAGE_MODEL, self.aux_layers)
        else:
            methods = delegating_methods(LANGUAGE_MODEL)
        tree = replace_child(tree, wrapper, add_methods(add_base(wrapper, PROTOCOL), methods, tree))
        return add_import(tree, self.context, INTERFACES, PROTOCOL)


def _builds_bare_decoder(wrapper: cst.ClassDef) -> bool:
    """Whether ``__init__`` sets ``self.language_model = DeepseekV2Model(...)`` (0.15.x)."""
    assignments = m.findall(
        method(wrapper, "__init__"),
        m.Assign(targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name("language_model")))], value=m.Call()),
    )
    assignment: cst.Assign = only(assignments, f"`{LANGUAGE_MODEL} = ...(...)` in {WRAPPER}.__init__")  # type: ignore[assignment]
    callee = assignment.value.func  # type: ignore[attr-defined]
    if m.matches(callee, m.Name("DeepseekV2Model")):
        return True
    if m.matches(callee, m.Name("init_vllm_registered_model")):
        return False
    raise Unrecognised(f"expected {LANGUAGE_MODEL} to be a DeepseekV2Model or init_vllm_registered_model(...)")


class KimiK25Target(SingleFileTarget):
    name = "Kimi-K2.5 wrapper"
    path = PATH

    def examine(self, source: str, read: ReadFile, options: Options) -> Verdict:
        return judge(
            source,
            lambda: KimiK25Eagle3(CodemodContext(), aux_layers=options.aux_layers),
            native=lambda module: implements_eagle3(module, WRAPPER),
        )


TARGET = KimiK25Target()
