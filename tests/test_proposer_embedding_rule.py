"""The rule that refuses a multimodal class whose language model vLLM's EAGLE proposer cannot take the token
embedding from (``get_language_model().model.embed_tokens``, or ``.embedding``), on a small synthetic tree (no
vLLM code here): a bare decoder of another file has no ``self.model``; a decoder of the class's own file answers
``model`` with itself where that is sound; a causal LM whose model builds neither name is refused too; a causal LM
holding a model with ``embed_tokens`` is served."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_eagle3_patch.discovery import discover
from vllm_eagle3_patch.eagle3.release import Release

pytestmark = pytest.mark.unit  # no release tree, no interpreter: the tier a contributor runs while editing

REGISTRY = """
_TEXT_GENERATION_MODELS = {}
_MULTIMODAL_MODELS = {
    "BareVL": ("toy_vl", "BareVL"),
    "OwnDecoderVL": ("toy_vl", "OwnDecoderVL"),
    "ServedVL": ("toy_vl", "ServedVL"),
    "WteVL": ("toy_vl", "WteVL"),
    "HidingVL": ("toy_vl", "HidingVL"),
    "NoEmbeddingVL": ("toy_vl", "NoEmbeddingVL"),
}
"""

LANGUAGE_MODELS = '''
class CollectingModel(nn.Module):
    """Upstream's decoder that collects aux states itself (Phi-4-MM's LlamaModel)."""

    def __init__(self, config):
        self.embed_tokens = VocabParallelEmbedding(config)

    def forward(self, x):
        for idx, layer in enumerate(self.layers[self.start_layer:self.end_layer]):
            if idx in self.aux_hidden_state_layers:
                pass
        return x


class NativeForCausalLM(nn.Module, SupportsEagle3):

    def __init__(self, config):
        self.model = CollectingModel(config)

    def forward(self, x):
        return self.model(x)


class WteModel(nn.Module):

    def __init__(self, config):
        self.wte = VocabParallelEmbedding(config)

    def forward(self, x):
        for layer in self.layers[self.start_layer:self.end_layer]:
            x = layer(x)
        return x


class WteForCausalLM(nn.Module, SupportsEagle3):

    def __init__(self, config):
        self.model = WteModel(config)

    def forward(self, x):
        return self.model(x)
'''

WRAPPERS = """
from .toy_lm import CollectingModel, NativeForCausalLM, WteForCausalLM


class OwnModel(nn.Module):

    def __init__(self, config):
        self.embed_tokens = VocabParallelEmbedding(config)

    def forward(self, x):
        for layer in self.layers[self.start_layer:self.end_layer]:
            x, residual = layer(x, residual)
        return x


class BareVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.vision_tower = Tower(config)
        self.language_model = CollectingModel(config)

    def forward(self, x):
        return self.language_model(x)


class OwnDecoderVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.model = OwnModel(config)

    def forward(self, x):
        return self.model(x)


class ServedVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.language_model = NativeForCausalLM(config)

    def forward(self, x):
        return self.language_model(x)


class WteVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.language_model = WteForCausalLM(config)

    def forward(self, x):
        return self.language_model(x)


class HidingModel(OwnModel):

    def model(self):
        return None


class HidingVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.model = HidingModel(config)

    def forward(self, x):
        return self.model(x)


class NoEmbeddingModel(nn.Module):

    def __init__(self, config):
        self.norm = Norm(config)

    def forward(self, x):
        for layer in self.layers[self.start_layer:self.end_layer]:
            x, residual = layer(x, residual)
        return x


class NoEmbeddingVL(nn.Module, SupportsMultiModal):

    def __init__(self, config):
        self.model = NoEmbeddingModel(config)

    def forward(self, x):
        return self.model(x)
"""


PROPOSER = """
def load_model(self, target_model):
    target_language_model = target_model.get_language_model()
    embedding = target_language_model.model.embed_tokens
"""


def tree(root: Path, proposer: str) -> Path:
    """A package with the registry, the two model files and the proposer's file."""
    package = root / "vllm"
    models = package / "model_executor" / "models"
    models.mkdir(parents=True)
    for name, text in (("registry", REGISTRY), ("toy_lm", LANGUAGE_MODELS), ("toy_vl", WRAPPERS)):
        (models / f"{name}.py").write_text(text)
    (package / "v1" / "spec_decode").mkdir(parents=True)
    (package / "v1" / "spec_decode" / "eagle.py").write_text(proposer)
    return package


@pytest.fixture(scope="module")
def discovery(tmp_path_factory):
    return discover(Release(tree(tmp_path_factory.mktemp("tree"), PROPOSER)), ())


def test_a_proposer_sharing_the_target_models_own_embedding_judges_no_language_model(tmp_path):
    """0.8.x's proposer reads ``target.model.embed_tokens`` of the class itself, never a language model's."""
    older = discover(Release(tree(tmp_path, "target_model.model.embed_tokens\n")), ())
    assert not any("get_language_model()" in reason for reason in older.unrecognised.values()), older.unrecognised


@pytest.mark.parametrize(
    ("architecture", "language_model"),
    [
        ("BareVL", "CollectingModel (self.language_model)"),
        ("HidingVL", "HidingModel (self.model)"),
        ("NoEmbeddingVL", "NoEmbeddingModel (self.model)"),
    ],
    ids=["bare-decoder-of-another-file", "decoder-defining-model", "decoder-without-embedding"],
)
def test_a_language_model_without_self_model_is_refused_with_what_the_proposer_looks_for(
    discovery, architecture, language_model
):
    """Where a read-only ``model`` answering the decoder itself is not sound: a class other files share (Phi-4-MM's
    ``LlamaModel``), one that has a ``model`` of another kind the property would hide, one building no embedding."""
    reason = discovery.unrecognised[architecture]
    assert reason.startswith(f"its language model, {language_model}, has no self.model: "), reason
    assert "get_language_model().model.embed_tokens (or .embedding)" in reason
    assert architecture not in discovery.wrappers and architecture not in discovery.architectures
    assert all(family.path.endswith("toy_vl.py") for family in discovery.families), discovery.families


def test_a_decoder_of_its_own_file_answers_model_with_itself(discovery):
    """Molmo's shape: the class runs a decoder of its own file, which has no ``model`` and builds ``embed_tokens``;
    its file's family gives it a read-only ``model`` answering itself (``patches/shared_embedding.py``)."""
    family = discovery.architectures["OwnDecoderVL"]
    assert (family.model, family.decoder, family.answers_model) == ("OwnModel", "self.model", True)
    assert "OwnDecoderVL" not in discovery.unrecognised


def test_a_model_without_embed_tokens_or_embedding_is_refused(discovery):
    reason = discovery.unrecognised["WteVL"]
    assert reason.startswith("WteModel, the model in its language model WteForCausalLM, builds no embed_tokens or")
    assert "WteVL" not in discovery.wrappers


def test_a_causal_lm_holding_a_model_with_embed_tokens_is_served(discovery):
    assert discovery.wrappers["ServedVL"].language_model == "NativeForCausalLM"
    assert "ServedVL" not in discovery.unrecognised
