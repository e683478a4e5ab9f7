"""Multimodal wrappers by rule: every registered multimodal architecture whose class runs a language model that is
an EAGLE-3 target.

The runner holds the multimodal class and asks ``supports_eagle3`` of it; the aux states come from its language
model's decoder.  So the rule reads, on the registered class's chain (``class_chain.py``): the attribute whose call
its ``forward`` returns unchanged (``return self.language_model.model(...)``), the class whose ``__init__`` builds
that attribute, and what it builds:

- ``init_vllm_registered_model(...)``: the architectures the call names (``architectures=["Qwen2ForCausalLM"]``),
  judged as the text registry's, or where it names none the one the checkpoint's text config names;
- a causal LM class: native, or a family's causal LM (its file patched by ``apply``);
- a family's bare model (Kimi-K2.5's ``DeepseekV2Model``), or upstream's collecting decoder (Phi-4-MM's
  ``LlamaModel``): the methods act on it, where the proposer can take the embedding from it (below).

The runner's gate is not the only check: vLLM's EAGLE proposer (``load_model``) shares the target's token
embedding with the drafter, taken from ``get_language_model().model.embed_tokens`` (or ``.embedding``), and
raises as the engine starts where there is none.  ``get_language_model()`` gives the child holding the language
model, the attribute the class's ``forward`` runs; so that child must be a causal LM holding ``self.model``
(a family's shows its embedding there once patched: ``patches/shared_embedding.py``), or a class of the file the
tool patches for it (the wrapper's, or the family's for a family's bare model) that has no ``model`` at all and
builds its embedding: a read-only ``model`` answers it with itself (:func:`answers_model`).  A bare decoder of a
file the tool does not patch for it (Phi-4-MM's ``LlamaModel``) is refused.

Each such class becomes a :class:`FoundWrapper`; every other architecture is refused with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from .codemod.family import CHECKPOINTS_MODEL, Family, FoundWrapper, Wrapper
from .eagle3.class_chain import Chain, ChainReader, ClassInfo
from .eagle3.modules import module_of
from .eagle3.release import MIXIN, REGISTERED_MODEL, Release
from .patches.shared_embedding import SHARED_EMBEDDINGS, TOKEN_EMBEDDING


@dataclass(frozen=True)
class Refused:
    reason: str
    decoder_only: Optional[bool] = None
    """False: an encoder-decoder model, which no rule serves; None: not known."""


def find_wrapper(
    release: Release, chains: ChainReader, chain: Chain, families: tuple[Family, ...]
) -> FoundWrapper | Refused:
    """The wrapper serving a registered multimodal class (``chain``, which lacks EAGLE-3), or why there is none."""
    cls = chain.classes[0]
    runner = next((c for c in chain.classes if "forward" in c.methods), None)
    if runner is not None and runner.reads_encoder_outputs:
        return Refused(
            f"{cls.name} is an encoder-decoder model (its forward takes encoder_outputs, which its decoder "
            "cross-attends to); EAGLE-3 drafts for decoder-only language models",
            decoder_only=False,
        )
    if runner is None or runner.returns_from is None:
        return Refused(
            f"{cls.name}'s forward does not return what one language model it holds gives (return "
            "self.language_model(...)), so the aux states would not reach the runner"
        )
    attribute = runner.returns_from
    holder = next((c for c in chain.classes if any(a == attribute for a, _ in c.holds)), None)
    if holder is None:
        return Refused(f"no class on {cls.name}'s chain builds self.{attribute} (its language model) in __init__")
    built = {callee for a, callee in holder.holds if a == attribute}
    if len(built) != 1:
        several = ", ".join(sorted(built))
        return Refused(f"{holder.name}.__init__ builds self.{attribute} from several classes ({several})")
    wrapper = Wrapper(_path(holder.module), holder.name, language_model=f"self.{attribute}")
    (callee,) = built
    if callee == REGISTERED_MODEL:
        named = {n for a, names in holder.registered if a == attribute for n in names}
        if not named:
            return FoundWrapper(wrapper, CHECKPOINTS_MODEL)
        return _registered(release, chains, wrapper, tuple(sorted(named)), families)
    model = chains.resolve(holder.module, callee)
    model_chain = chains.chain(model.module, model.name) if model is not None else None
    if model_chain is None:
        return Refused(f"{holder.name} builds its language model from {callee}, a class this tool cannot read")
    return _judged(release, wrapper, model_chain, families, chains)


def _registered(
    release: Release, chains: ChainReader, wrapper: Wrapper, named: tuple[str, ...], families: tuple[Family, ...]
) -> FoundWrapper | Refused:
    """A language model built by the registry from the architectures the call names: each must be a target."""
    verdicts = []
    for architecture in named:
        entry = release.text_generation_models.get(architecture)
        chain = chains.registered(*entry) if entry else None
        if chain is None:
            return Refused(f"its language model, {architecture}, is not a text architecture this vLLM registers")
        verdicts.append(_judged(release, wrapper, chain, families, chains))
    refused = next((v for v in verdicts if isinstance(v, Refused)), None)
    return refused or verdicts[0]


def _judged(
    release: Release, wrapper: Wrapper, model: Chain, families: tuple[Family, ...], chains: ChainReader
) -> FoundWrapper | Refused:
    """The wrapper of a language model whose class has the chain ``model``, where the proposer can take the
    embedding from it."""
    found = _served(wrapper, model, families)
    if isinstance(found, Refused) or not release.shares_the_language_models_embedding:
        return found
    family = found.family if found.bare else None  # a family's bare model: its file is patched, not the wrapper's
    patched = module_of(family.path if family is not None else wrapper.path)
    unshared = unshared_embedding(chains, model, wrapper.language_model.removeprefix("self."), families, patched)
    if unshared is not None:
        return Refused(unshared)
    shown = (found.family is None or found.bare) and answers_model(model, patched)  # a causal LM shows its own
    return replace(found, answers_model=True) if shown else found


def _served(wrapper: Wrapper, model: Chain, families: tuple[Family, ...]) -> FoundWrapper | Refused:
    """The wrapper of a language model whose class has the chain ``model``, as the runner judges it."""
    name = model.classes[0].name
    if model.declares_eagle3:
        return FoundWrapper(wrapper, name)
    for family in families:
        module = module_of(family.path)
        if model.includes(module, family.causal_lm):
            return FoundWrapper(wrapper, name, family)
        if model.includes(module, family.model):
            return FoundWrapper(wrapper, name, family, bare=True)
    runs = next((c for c in model.classes if "forward" in c.methods), None)
    if runs is not None and runs.collects:  # upstream's decoder, bare (Phi-4-MM's LlamaModel, Aria's subclass)
        return FoundWrapper(wrapper, name, bare=True, mixin=MIXIN in model.base_names)
    return Refused(f"its language model, {name}, is not an EAGLE-3 target (no family this tool patches serves it)")


def held_language_model_refusal(
    release: Release, chains: ChainReader, chain: Chain, attribute: str, families: tuple[Family, ...]
) -> Optional[str]:
    """:func:`unshared_embedding` of the class ``chain``'s ``__init__`` builds in ``self.<attribute>`` (a decoder of
    its own file, which the class runs as a causal LM runs its model); None where that class cannot be read, or
    where the release's proposer does not take the embedding from the language model."""
    held = held_class(chains, chain, attribute) if release.shares_the_language_models_embedding else None
    holder = _holder(chain, attribute)  # not None where a class is held
    if held is None or holder is None:
        return None
    return unshared_embedding(chains, held, attribute, families, holder.module)


def held_answers_model(release: Release, chains: ChainReader, chain: Chain, attribute: str) -> bool:
    """Whether the class ``chain``'s ``__init__`` builds in ``self.<attribute>`` (its language model) gains a
    read-only ``model`` answering itself (:func:`answers_model`), in the file of the class that builds it."""
    held = held_class(chains, chain, attribute) if release.shares_the_language_models_embedding else None
    holder = _holder(chain, attribute)  # not None where a class is held
    return held is not None and holder is not None and answers_model(held, holder.module)


def held_class(chains: ChainReader, chain: Chain, attribute: str) -> Optional[Chain]:
    """The chain of the class the first class of ``chain`` that builds ``self.<attribute>`` builds there."""
    holder = _holder(chain, attribute)
    callee = next((callee for a, callee in holder.holds if a == attribute), None) if holder else None
    model = chains.resolve(holder.module, callee) if holder and callee else None
    return chains.chain(model.module, model.name) if model is not None else None


def _holder(chain: Chain, attribute: str) -> Optional[ClassInfo]:
    return next((c for c in chain.classes if any(a == attribute for a, _ in c.holds)), None)


def answers_model(language_model: Chain, patched: str) -> bool:
    """Whether a read-only ``model`` answering the language model itself is sound: its class is of ``patched``, the
    file the tool patches for it (never a class other files share, as Phi-4-MM's ``LlamaModel``), nothing on its
    chain builds, defines or inherits a ``model`` (which the property would hide), and the chain builds the token
    embedding the proposer then finds (``embed_tokens``, ``embedding``, or a ``VocabParallelEmbedding`` that
    ``patches/shared_embedding.py`` shows as ``embed_tokens``).  A property is no child module: the weights, their
    names and every walk over the modules stay as vLLM wrote them, and vLLM's readers take ``model`` one step."""
    classes = language_model.classes
    defines = any("model" in c.methods for c in classes)
    if classes[0].module != patched or defines or _holder(language_model, "model") is not None:
        return False
    return any(a in SHARED_EMBEDDINGS or callee == TOKEN_EMBEDDING for c in classes for a, callee in c.holds)


def unshared_embedding(
    chains: ChainReader, language_model: Chain, attribute: str, families: tuple[Family, ...], patched: str
) -> Optional[str]:
    """Why vLLM's EAGLE proposer could not take the token embedding from the language model whose class has the
    chain ``language_model``, held in ``self.<attribute>`` (what ``get_language_model()`` gives), or None where
    it can: a family's causal LM (its patched file shows it there), a class holding ``self.model`` that builds
    ``embed_tokens`` or ``embedding`` (or is a class this tool cannot read: judged as vLLM wrote it), or a class
    of ``patched`` (the file the tool patches for it) that a read-only ``model`` can answer with itself."""
    name = language_model.classes[0].name
    if any(language_model.includes(module_of(f.path), f.causal_lm) for f in families):
        return None
    holder = _holder(language_model, "model")
    if holder is None:
        if answers_model(language_model, patched):
            return None
        return f"its language model, {name} (self.{attribute}), has no self.model{_FAILS}"
    callee = next(callee for a, callee in holder.holds if a == "model")
    model = chains.resolve(holder.module, callee)
    inner = chains.chain(model.module, model.name) if model is not None else None
    if inner is None or any(a in SHARED_EMBEDDINGS for c in inner.classes for a, _ in c.holds):
        return None
    return f"{callee}, the model in its language model {name}, builds no {' or '.join(SHARED_EMBEDDINGS)}{_FAILS}"


_FAILS = (
    ": vLLM's EAGLE proposer takes the token embedding it shares with the drafter from "
    f"get_language_model().model.{SHARED_EMBEDDINGS[0]} (or .{SHARED_EMBEDDINGS[1]}), "
    "and the engine would fail to start"
)


def _path(module: str) -> str:
    return f"{module.replace('.', '/')}.py"
