"""The target's token embedding, shown where vLLM's proposers look for it to share it with the drafter.

Every release's EAGLE proposer (DFlash's and the new model runner's too) reads
``target.model.embed_tokens`` (or ``.embedding``); a decoder that names it otherwise (``wte``,
``word_embeddings``) or sits elsewhere (GPT-2's ``self.transformer``) would make the drafter fail to
load.  For a multimodal class ``target`` is ``get_language_model()``: where that is the model itself
(Molmo's ``MolmoModel``, Aria's ``AriaTextModel``), the model answers ``model`` with itself.
``decoder_eagle3.py`` calls this last, so a loop the codemod cannot follow is named first.
"""

from __future__ import annotations

from typing import Optional

from vllm_eagle3_patch.codemod.cst_tools import (
    add_methods,
    assignment,
    cst,
    find,
    has_method,
    is_attribute,
    is_name,
    is_self_attribute,
    method,
    replace_child,
    sole_statement,
    top_level_class,
)
from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.patch import Unrecognised

SHARED_EMBEDDINGS = ("embed_tokens", "embedding")
"""Where vLLM's proposers take the target's token embedding to share it with the drafter: they read
``target.model.embed_tokens`` (or ``.embedding``) on every release (the EAGLE proposer, DFlash's, the new
model runner's), and a target without one makes the drafter fail to load."""

TOKEN_EMBEDDING = "VocabParallelEmbedding"


def share_the_embedding(tree: cst.Module, family: Family) -> cst.Module:
    """Show the proposers the embedding where they look for it, without moving it.

    A read-only ``model`` on the causal LM where the decoder sits elsewhere (GPT-2's ``self.transformer``),
    and a read-only ``embed_tokens`` on that model where its embedding has another name (``wte``,
    ``word_embeddings``, OPT's ``decoder.embed_tokens``).  Properties register no module, so the
    weights, their names and their loading stay exactly as vLLM wrote them.
    """
    causal_lm = top_level_class(tree, family.causal_lm)
    held = family.decoder.split(".")[1]
    outer = _outer_model(tree, family)
    embedding = _embedding_path(outer, top_level_class(tree, family.model), family)
    if embedding is not None and not has_method(outer, SHARED_EMBEDDINGS[0]):
        shown = _read_only(SHARED_EMBEDDINGS[0], f"self.{embedding}")
        tree = replace_child(tree, outer, add_methods(outer, shown, tree))
    if family.answers_model:
        tree = answer_model_with_itself(tree, outer.name.value)
    if held == "model":
        return tree
    builds = has_method(causal_lm, "__init__") and find(method(causal_lm, "__init__"), cst.Attribute, _is_self_model)
    if builds:
        raise Unrecognised(
            f"{family.causal_lm} keeps its decoder in self.{held} and something else in self.model, where "
            "vLLM's EAGLE proposer looks for the target's embedding"
        )
    causal_lm = top_level_class(tree, family.causal_lm)
    return replace_child(tree, causal_lm, add_methods(causal_lm, _read_only("model", f"self.{held}"), tree))


def answer_model_with_itself(tree: cst.Module, language_model: str) -> cst.Module:
    """A read-only ``model`` on the class ``language_model``, answering the instance itself.

    A multimodal class's ``get_language_model()`` gives this model, and vLLM's proposer reads its ``model``
    once (``multimodal.answers_model`` says where that is sound).  A property registers no module, so no walk
    over the modules meets a cycle, and the weights keep their names."""
    cls = top_level_class(tree, language_model)
    if has_method(cls, "model"):
        return tree
    return replace_child(tree, cls, add_methods(cls, _read_only("model", "self"), tree))


def _is_self_model(node: cst.Attribute) -> bool:
    return is_self_attribute(node, "model")


def _read_only(name: str, value: str) -> str:
    return (
        "@property\n"
        f"def {name}(self):\n"
        '    """Where vLLM\'s EAGLE proposer looks for the embedding it shares with the drafter."""\n'
        f"    return {value}\n"
    )


def _embedding_path(outer: cst.ClassDef, decoder: cst.ClassDef, family: Family) -> Optional[str]:
    """The token embedding's attribute path from ``outer`` where the proposers would not find it (``wte``),
    or None where they do: ``embed_tokens``/``embedding`` built there, or inherited from a model base."""
    built = _built_embeddings(outer)
    if any(name in SHARED_EMBEDDINGS for name in built):
        return None
    inside = family.decoder.split(".")[2:]
    if not built and inside:  # the decoder's own (OPT: self.model.decoder.embed_tokens)
        built = [".".join([*inside, name]) for name in _built_embeddings(decoder)]
    if len(built) == 1:
        return built[0]
    if built:
        raise Unrecognised(
            f"{outer.name.value} builds several token embeddings ({', '.join(built)}): which one "
            "vLLM's EAGLE proposer should share with the drafter is not clear"
        )
    if any(not _is_interface(base.value) for base in outer.bases):
        return None  # a model base builds it (Glm4Model(LlamaModel))
    raise Unrecognised(
        f"{outer.name.value} builds no token embedding (self.embed_tokens, or a {TOKEN_EMBEDDING}), which vLLM's "
        "EAGLE proposer shares with the drafter"
    )


def _built_embeddings(model: cst.ClassDef) -> list[str]:
    """The attributes ``__init__`` builds a token embedding in: ``self.embed_tokens``/``self.embedding``
    (whatever builds them) and every ``self.<x> = VocabParallelEmbedding(...)``, in order, once each."""
    if not has_method(model, "__init__"):
        return []
    names: list[str] = []
    for line in find(method(model, "__init__"), cst.SimpleStatementLine):
        target, value = assignment(sole_statement(line)) or (None, None)
        if not (isinstance(target, cst.Attribute) and is_name(target.value, "self")):
            continue
        name = target.attr.value
        callee = value.func if isinstance(value, cst.Call) else None
        embedding = is_name(callee, TOKEN_EMBEDDING) or is_attribute(callee, TOKEN_EMBEDDING)
        if (name in SHARED_EMBEDDINGS or embedding) and name not in names:
            names.append(name)
    return names


def _outer_model(tree: cst.Module, family: Family) -> cst.ClassDef:
    """The model the causal LM holds, where the proposer looks for the embedding: the decoder itself, or where
    the decoder sits inside it (``self.model.decoder``: OPT's; ``self.transformer.encoder``: ChatGLM's) the
    class the causal LM builds in that first attribute."""
    if family.decoder.count(".") < 2:
        return top_level_class(tree, family.model)
    held = family.decoder.split(".")[1]
    init = method(top_level_class(tree, family.causal_lm), "__init__")
    params = (*init.params.params, *init.params.kwonly_params)
    defaults = {param.name.value: param.default for param in params if param.default is not None}
    classes = {node.name.value: node for node in tree.body if isinstance(node, cst.ClassDef)}
    for line in find(init, cst.SimpleStatementLine, lambda line: True):
        target, value = assignment(sole_statement(line)) or (None, None)
        if target is not None and is_self_attribute(target, held) and isinstance(value, cst.Call):
            callee = value.func
            callee = defaults.get(callee.value, callee) if is_name(callee) else callee
            if is_name(callee) and callee.value in classes:
                return classes[callee.value]
    raise Unrecognised(f"expected {family.causal_lm}.__init__ to build self.{held} from a class of its file")


def _is_interface(base: cst.BaseExpression) -> bool:
    """``nn.Module`` and the interfaces and mixins beside it: bases that build no layers."""
    name = base.attr.value if isinstance(base, cst.Attribute) else base.value if isinstance(base, cst.Name) else ""
    return name == "Module" or name.startswith("Supports") or name.endswith(("Mixin", "Protocol"))
