"""What the catalog says about a model family: the data the decoder and wrapper codemods read.

A family is a vLLM model file: a decoder-only model whose ``forward`` loops over its layers in a shape of
``eagle3/loop_shapes.py``, and the causal LM that holds it.  ``patches/decoder_eagle3.py`` and
``patches/wrapper_eagle3.py`` turn it into patches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .patch import Policy


@dataclass(frozen=True)
class Wrapper:
    """A multimodal class that holds a language model (``multimodal.py`` finds it by rule)."""

    path: str
    """Relative to ``vllm/``."""
    cls: str
    name: str = ""
    """For people: the checkpoints it serves (``Kimi-K2.5``; ``catalog.NAMED_WRAPPERS``)."""
    language_model: str = "self.language_model"
    """The attribute holding the language model: a causal LM (the methods are handed on to it), or a bare
    model (the methods act on it directly)."""


@dataclass(frozen=True)
class Family:
    name: str
    path: str
    """The model file, relative to ``vllm/``."""
    model: str
    """The decoder class whose ``forward`` loops over the layers (e.g. ``Gemma3Model``)."""
    causal_lm: str
    """The class vLLM's runner holds (it and its subclasses gain ``SupportsEagle3``)."""
    model_types: tuple[str, ...]
    """``hf_text_config.model_type`` values the speculative-config gate must accept."""
    decoder: str = "self.model"
    """Where ``causal_lm`` keeps its ``model`` instance."""
    ids_on_the_class: bool = False
    """Also declare the empty ids on the model class, for subclasses in other files that run
    its ``forward`` but skip its ``__init__`` (Qwen3.5's model and Qwen3-Next's)."""
    policy: Policy = Policy.OPTIONAL
    """``REQUIRED``: a vLLM whose file cannot be patched is refused as a whole (DeepSeek, the
    tool's first purpose); ``OPTIONAL``: the file is left alone and the other patches are still applied."""
    forward_from: Optional[Family] = None
    """The family whose model's ``forward`` this family's model inherits (Qwen3.5's runs
    Qwen3-Next's): here only the model's ``__init__`` and the causal LM are patched, and only
    where that family's file is patchable too."""

    runs_upstream_capture: bool = False
    """The model has no ``forward`` of its own and runs that of a model in another file which
    collects the ids itself (an ``EagleModelMixin`` decoder, 0.18.0 on: ``Glm4Model(LlamaModel)``):
    only the causal LM lacks the protocol and the methods."""

    answers_model: bool = False
    """A multimodal class runs the model (or what holds the decoder) as its language model, which has no
    ``model`` of its own: a read-only ``model`` answers it with itself, where vLLM's proposer takes the
    embedding (``get_language_model().model``; ``multimodal.answers_model``)."""


CHECKPOINTS_MODEL = "the language model its checkpoint's text config names"


@dataclass(frozen=True)
class FoundWrapper:
    """A multimodal class that runs a language model the runner can reach through it."""

    wrapper: Wrapper
    """Where it is (``cls``: the class of the chain that builds the language model) and which attribute holds it."""
    language_model: str
    """For people: the class it builds, or :data:`CHECKPOINTS_MODEL`."""
    family: Optional[Family] = None
    """The family whose file makes the language model an EAGLE-3 target (None: native, or the checkpoint's)."""
    bare: bool = False
    """The language model is a bare model (no causal LM around it), the family's or upstream's collecting one:
    the methods act on it."""
    mixin: bool = False
    """... and that bare model is upstream's ``EagleModelMixin`` decoder, whose own setter lays out its ids."""
    model_types: tuple[str, ...] = ()
    """The gate's: the model types of the architectures it serves."""
    answers_model: bool = False
    """... and that bare model, a class of the wrapper's file with no ``model`` of its own, gains a read-only
    ``model`` answering itself, where vLLM's proposer takes the embedding (``multimodal.answers_model``)."""

    @property
    def chosen_by_checkpoint(self) -> bool:
        return self.language_model == CHECKPOINTS_MODEL

    @property
    def name(self) -> str:
        return self.wrapper.cls
