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

from dataclasses import dataclass
from typing import Optional

from vllm_eagle3_patch.codemod import implements_eagle3, judge
from vllm_eagle3_patch.cst_tools import (
    add_base,
    add_import,
    add_methods,
    assigned,
    cst,
    find_statements,
    is_name,
    is_self_attribute,
    method,
    only,
    replace_child,
    sole_statement,
    top_level_class,
)
from vllm_eagle3_patch.patches._eagle3_methods import delegating_methods, eagle3_methods
from vllm_eagle3_patch.target import Options, ReadFile, SingleFileTarget, Unrecognised, Verdict

PATH = "model_executor/models/kimi_k25.py"
WRAPPER = "KimiK25ForConditionalGeneration"
PROTOCOL = "SupportsEagle3"
PACKAGE = "vllm.model_executor.models"
INTERFACES = f"{PACKAGE}.interfaces"
LANGUAGE_MODEL = "self.language_model"


@dataclass(frozen=True)
class KimiK25Eagle3:
    """Give ``KimiK25ForConditionalGeneration`` the ``SupportsEagle3`` protocol by delegation."""

    aux_layers: Optional[tuple[int, ...]] = None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        wrapper = top_level_class(tree, WRAPPER)
        if _builds_bare_decoder(wrapper):
            methods = eagle3_methods(LANGUAGE_MODEL, self.aux_layers)
        else:
            methods = delegating_methods(LANGUAGE_MODEL)
        tree = replace_child(tree, wrapper, add_methods(add_base(wrapper, PROTOCOL), methods, tree))
        return add_import(tree, INTERFACES, PROTOCOL, PACKAGE)


def _builds_bare_decoder(wrapper: cst.ClassDef) -> bool:
    """Whether ``__init__`` sets ``self.language_model = DeepseekV2Model(...)`` (0.15.x)."""
    assignments = find_statements(method(wrapper, "__init__"), cst.SimpleStatementLine, _builds_language_model)
    line = only(assignments, f"`{LANGUAGE_MODEL} = ...(...)` in {WRAPPER}.__init__")
    callee = line.body[0].value.func  # type: ignore[attr-defined]
    if is_name(callee, "DeepseekV2Model"):
        return True
    if is_name(callee, "init_vllm_registered_model"):
        return False
    raise Unrecognised(f"expected {LANGUAGE_MODEL} to be a DeepseekV2Model or init_vllm_registered_model(...)")


def _builds_language_model(line: cst.SimpleStatementLine) -> bool:
    """``self.language_model = <callee>(...)``, alone on its line."""
    statement = sole_statement(line)
    return is_self_attribute(assigned(statement), "language_model") and isinstance(statement.value, cst.Call)  # type: ignore[union-attr]


class KimiK25Target(SingleFileTarget):
    name = "Kimi-K2.5 wrapper"
    path = PATH

    def examine(self, source: str, read: ReadFile, options: Options) -> Verdict:
        return judge(
            source,
            lambda: KimiK25Eagle3(aux_layers=options.aux_layers),
            native=lambda module: implements_eagle3(module, WRAPPER),
            reads=lambda function: function.cls == WRAPPER and function.name == "__init__",
        )


TARGET = KimiK25Target()
