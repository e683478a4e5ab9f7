"""The target's token embedding shown where vLLM's proposers look for it (``patches/shared_embedding.py``),
on synthetic decoders (no vLLM code here)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import libcst as cst
import pytest
from helpers.decoder_sources import TOY, reader, source
from helpers.toy_decoders import IMPORT, Eagle3, load, toy_family, toy_source

from vllm_eagle3_patch.codemod.family import Family
from vllm_eagle3_patch.codemod.patch import Options, State
from vllm_eagle3_patch.patches.decoder_eagle3 import DecoderEagle3, DecoderPatch
from vllm_eagle3_patch.patches.shared_embedding import answer_model_with_itself

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing


def test_a_decoder_outside_self_model_is_shown_to_the_proposer_as_model() -> None:
    """vLLM's EAGLE proposer takes the target's embedding from ``self.model``: a read-only ``model``
    hands it the decoder kept elsewhere, registering no second module."""
    family = Family("Toy", TOY.path, "ToyModel", "ToyForCausalLM", ("toy",), decoder="self.backbone")
    after = DecoderEagle3(family).transform_module(cst.parse_module(source())).code
    causal_lm = after[after.index("class ToyForCausalLM") :]
    assert "    @property\n    def model(self):  # vllm-eagle3-patch\n" in causal_lm, causal_lm
    assert "        return self.backbone\n" in causal_lm
    compile(after, "<patched>", "exec")


class VocabParallelEmbedding:
    """Stands in for vLLM's token embedding."""


NESTED = """

class ToyOuterModel(nn.Module):

    def __init__(self):
        super().__init__()
        self.decoder = ToyModel()
"""


def proposer_embedding(causal_lm: Any) -> Any:
    """The embedding vLLM's EAGLE proposer takes from the target (``_maybe_share_embeddings``), or its error."""
    inner = getattr(causal_lm, "model", None)
    if inner is None:
        raise AttributeError("Target model does not have 'model' attribute")
    if hasattr(inner, "embed_tokens"):
        return inner.embed_tokens
    if hasattr(inner, "embedding"):
        return inner.embedding
    raise AttributeError("Target model does not have 'embed_tokens' or 'embedding' attribute")


EMBEDDING_LAYOUTS = {
    # name: (source, family's decoder, where the embedding really is)
    "gpt2-transformer-wte": (
        toy_source("single-h-gpt2", decoder="transformer").replace(
            "self.embed_tokens = None", "self.wte = VocabParallelEmbedding()"
        ),
        "self.transformer",
        "transformer.wte",
    ),
    "mamba-backbone-embeddings": (
        toy_source("no-pipeline-single", decoder="backbone").replace(
            "self.embed_tokens = None", "self.embeddings = VocabParallelEmbedding()"
        ),
        "self.backbone",
        "backbone.embeddings",
    ),
    "ling-model-word-embeddings": (
        toy_source("pair-islice").replace(
            "self.embed_tokens = None", "self.word_embeddings = VocabParallelEmbedding()"
        ),
        "self.model",
        "model.word_embeddings",
    ),
    "opt-model-decoder-embed-tokens": (
        (toy_source("pair-islice") + NESTED).replace("self.model = ToyModel()", "self.model = ToyOuterModel()"),
        "self.model.decoder",
        "model.decoder.embed_tokens",
    ),
    "chatglm-transformer-embedding": (
        (toy_source("pair-islice") + NESTED)
        .replace("self.model = ToyModel()", "self.transformer = ToyOuterModel()")
        .replace("self.decoder = ToyModel()", "self.decoder = ToyModel()\n        self.embedding = None"),
        "self.transformer.decoder",
        "transformer.embedding",
    ),
}


@pytest.mark.parametrize("layout", EMBEDDING_LAYOUTS)
def test_the_proposer_finds_the_embedding_in_every_layout(layout):
    """vLLM's proposers share ``target.model.embed_tokens`` (or ``.embedding``) with the drafter and raise
    without it: the patched target shows them its own embedding, the very object, wherever it is kept."""
    code, decoder, where = EMBEDDING_LAYOUTS[layout]
    namespace = {"VocabParallelEmbedding": VocabParallelEmbedding}
    with pytest.raises(AttributeError):  # as vLLM wrote it, the proposer fails
        proposer_embedding(load(code, extra=namespace)["ToyForCausalLM"]())
    verdict = DecoderPatch(toy_family(decoder=decoder)).examine(code, reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    causal_lm = load(verdict.patched.replace(IMPORT, ""), Eagle3, extra=namespace)["ToyForCausalLM"]()
    embedding = causal_lm
    for attribute in where.split("."):
        embedding = getattr(embedding, attribute)
    assert proposer_embedding(causal_lm) is embedding


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("        self.embed_tokens = None\n", ""), "ToyModel builds no token embedding"),
        (
            (
                "self.embed_tokens = None",
                "self.wte = VocabParallelEmbedding()\n        self.wpe = VocabParallelEmbedding()",
            ),
            "ToyModel builds several token embeddings (wte, wpe)",
        ),
    ],
    ids=["no-embedding", "two-embeddings"],
)
def test_a_target_whose_embedding_is_not_clear_is_refused(change, reason):
    verdict = DecoderPatch(toy_family()).examine(toy_source("pair-islice").replace(*change), reader(), Options())
    assert verdict.state is State.UNSUPPORTED and reason in verdict.reason, verdict.reason


def test_a_causal_lm_keeping_something_else_in_self_model_is_refused():
    code = toy_source("single-h-gpt2", decoder="transformer").replace(
        "self.transformer = ToyModel()\n", "self.transformer = ToyModel()\n        self.model = None\n", 1
    )
    verdict = DecoderPatch(toy_family(decoder="self.transformer")).examine(code, reader(), Options())
    assert verdict.state is State.UNSUPPORTED and "something else in self.model" in verdict.reason, verdict.reason


@pytest.mark.parametrize("layout", EMBEDDING_LAYOUTS)
def test_a_model_a_multimodal_class_runs_answers_model_with_itself(layout):
    """A multimodal class whose ``get_language_model()`` is the family's model (Molmo's ``MolmoModel``): vLLM's
    proposer reads that model's ``model``, which a read-only property answers with the model itself; a property
    is no child module, so nothing walking the modules meets the cycle."""
    code, decoder, where = EMBEDDING_LAYOUTS[layout]
    family = replace(toy_family(decoder=decoder), answers_model=True)
    namespace = {"VocabParallelEmbedding": VocabParallelEmbedding}
    verdict = DecoderPatch(family).examine(code, reader(), Options())
    assert verdict.state is State.UNPATCHED, verdict.reason
    causal_lm = load(verdict.patched.replace(IMPORT, ""), Eagle3, extra=namespace)["ToyForCausalLM"]()
    language_model = getattr(causal_lm, decoder.split(".")[1])
    assert language_model.model is language_model
    embedding = causal_lm
    for attribute in where.split("."):
        embedding = getattr(embedding, attribute)
    assert proposer_embedding(language_model) is embedding is proposer_embedding(causal_lm)


def test_answering_model_twice_adds_one_property():
    tree = cst.parse_module(toy_source("pair-islice"))
    once = answer_model_with_itself(tree, "ToyModel")
    assert answer_model_with_itself(once, "ToyModel").code == once.code
    assert once.code.count("def model(self):  # vllm-eagle3-patch") == 1
    assert "        return self\n" in once.code[once.code.index("class ToyModel") :]
