"""Multimodal wrappers by rule: every registered multimodal architecture whose class runs a language model that is
an EAGLE-3 target.

The runner holds the multimodal class and asks ``supports_eagle3`` of it; the aux states come from its language
model's decoder.  So the rule reads, on the registered class's chain (``class_chain.py``): the attribute whose call
its ``forward`` returns unchanged (``return self.language_model.model(...)``), the class whose ``__init__`` builds
that attribute, and what it builds:

- ``init_vllm_registered_model(...)``: the architectures the call names (``architectures=["Qwen2ForCausalLM"]``),
  judged as the text registry's, or where it names none the one the checkpoint's text config names;
- a causal LM class: native, or a family's causal LM (its file patched by ``apply``);
- a family's bare model (Kimi-K2.5's ``DeepseekV2Model`` on 0.15.x), or upstream's collecting decoder
  (Phi-4-MM's ``LlamaModel``): the methods act on it.

Each such class becomes a :class:`FoundWrapper`; every other architecture is refused with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .codemod.family import CHECKPOINTS_MODEL, Family, FoundWrapper, Wrapper
from .eagle3.class_chain import Chain, ChainReader, ClassInfo
from .eagle3.release import MIXIN, REGISTERED_MODEL, Release


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
    return _judged(wrapper, model_chain, families)


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
        verdicts.append(_judged(wrapper, chain, families))
    refused = next((v for v in verdicts if isinstance(v, Refused)), None)
    return refused or verdicts[0]


def _judged(wrapper: Wrapper, model: Chain, families: tuple[Family, ...]) -> FoundWrapper | Refused:
    """The wrapper of a language model whose class has the chain ``model``."""
    name = model.classes[0].name
    if model.declares_eagle3:
        return FoundWrapper(wrapper, name)
    for family in families:
        module = _module(family.path)
        if model.includes(module, family.causal_lm):
            return FoundWrapper(wrapper, name, family)
        if model.includes(module, family.model):
            return FoundWrapper(wrapper, name, family, bare=True)
    runs = next((c for c in model.classes if "forward" in c.methods), None)
    if runs is not None and runs.collects:  # upstream's decoder, bare (Phi-4-MM's LlamaModel, Aria's subclass)
        return FoundWrapper(wrapper, name, bare=True, mixin=MIXIN in model.base_names)
    return Refused(f"its language model, {name}, is not an EAGLE-3 target (no family this tool patches serves it)")


def _path(module: str) -> str:
    return f"{module.replace('.', '/')}.py"


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def holder_of(chain: Chain, wrapper: Wrapper) -> Optional[ClassInfo]:
    return next((c for c in chain.classes if (_path(c.module), c.name) == (wrapper.path, wrapper.cls)), None)
