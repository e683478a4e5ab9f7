"""Tiny random-weight checkpoints for an end-to-end EAGLE-3 run: a target (DeepSeek-V3 by
default, or another family of ``TARGETS``), a locally built tokenizer, and EAGLE-3 drafters
whose proposals depend on the aux states.

Runs in the target interpreter (torch, transformers and safetensors come with vLLM); it
needs no network and no downloaded weights.  Hugging Face transformers' own model class
(``DeepseekV3ForCausalLM``, ``Gemma3ForCausalLM``, ...) builds the target and is the
numeric reference: its greedy tokens and its hidden states are what vLLM must reproduce.

How a drafter can prove the right layers arrive: its attention and MLP write nothing
(zero output projections), so its logits are ``lm_head(norm(fc(aux states)))`` and the
embedding of the next token plays no part.  ``fc`` mixes the three states with fixed
random projections and ``lm_head`` is solved by least squares so that, on the states
transformers computes for the reference trajectories, the drafter names the token the
target will produce one step later.  Fed those very states, it drafts what the target
accepts; fed any other layer, or nothing, it drafts noise.  The "blind" copy has a zero
``fc``: its logits are all zero, so it always drafts token 0, which the target never
produces on the reference prompts (checked when building).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

VOCAB = 96
HIDDEN = 64
LAYERS = 8
"""Eight layers: the default ids ``(2, n // 2, n - 3)`` are ``(2, 4, 5)``, three distinct states."""
PROMPTS = ((5, 17, 33, 42, 8, 71), (90, 12, 3, 58, 27, 64))
NEW_TOKENS = 20
EOS = 1
LOGIT_MARGIN = 8.0
"""The solved drafter gives the wanted token this much more logit than any other."""


@dataclass(frozen=True)
class TinyTarget:
    """How transformers builds a tiny target of one family: its classes and what its config differs in."""

    model_class: str
    config_class: str
    config: dict[str, Any]
    wrappers: tuple[str, ...] = ()
    """Other checkpoints made from this target's weights (names in ``WRAPPERS``)."""


COMMON_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "max_position_embeddings": 256,
    "initializer_range": 0.2,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "float32",
}
TARGETS: dict[str, TinyTarget] = {
    "deepseek_v3": TinyTarget(
        "DeepseekV3ForCausalLM",
        "DeepseekV3Config",
        {
            "intermediate_size": 128,
            "moe_intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "q_lora_rank": 32,
            "kv_lora_rank": 32,
            "qk_rope_head_dim": 16,
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "routed_scaling_factor": 1.0,
            "topk_method": "noaux_tc",  # what transformers' router does; vLLM reads these two
            "scoring_func": "sigmoid",
            "tie_word_embeddings": False,
        },
        wrappers=("kimi-k25",),
    ),
    "glm4_moe": TinyTarget(
        "Glm4MoeForCausalLM",
        "Glm4MoeConfig",
        {
            "intermediate_size": 128,
            "moe_intermediate_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,  # CPU attention needs head_dim >= 32
            "partial_rotary_factor": 0.5,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "norm_topk_prob": True,
            "use_qk_norm": True,
            "attention_bias": True,
            "tie_word_embeddings": False,
        },
    ),
    "gemma3_text": TinyTarget(
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "query_pre_attn_scalar": 32,
            "sliding_window": 8,  # shorter than the sequences: the local layers' window matters
            "tie_word_embeddings": True,  # vLLM's Gemma 3 always reads the embedding as lm_head
            "pad_token_id": 2,  # <unk>: Gemma's default, 0, is this tokenizer's <s>
            # the scaled embedding outweighs the layers at 0.2: the target would repeat its last token
            "initializer_range": 0.02,
        },
        wrappers=("gemma3-mm",),
    ),
    "phi3": TinyTarget(  # vLLM's Phi3ForCausalLM is Llama's, EAGLE-3 included: only the gate keeps it out
        "Phi3ForCausalLM",
        "Phi3Config",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,  # head_dim 32: CPU attention needs >= 32
            "tie_word_embeddings": False,
            "pad_token_id": 2,
        },
    ),
    # Architectures the rule finds in vLLM's registry (no Family entry: discovery.py), one per loop shape
    "mixtral": TinyTarget(
        "MixtralForCausalLM",
        "MixtralConfig",
        {
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": None,
            "tie_word_embeddings": False,
        },
    ),
    "gemma": TinyTarget(  # the language model of PaliGemma (tiny_multimodal.py), which vLLM builds by its text config
        "GemmaForCausalLM",
        "GemmaConfig",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh",  # what vLLM's Gemma reads (it warns on hidden_act alone)
            "tie_word_embeddings": True,  # vLLM's Gemma always reads the embedding as lm_head
            "pad_token_id": 2,  # at 0.02 (Gemma 3's) the scaled embedding outweighs the layers: it repeats a token
        },
    ),
    "aria_text": TinyTarget(  # Aria's mixture of experts (tiny_multimodal.py), a Llama-style loop with shared experts
        "AriaTextForCausalLM",
        "AriaTextConfig",
        {
            "intermediate_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "moe_num_experts": 4,
            "moe_topk": 2,
            "moe_num_shared_experts": 1,
            "tie_word_embeddings": False,
            "pad_token_id": 2,
        },
    ),
    "ernie4_5": TinyTarget(  # native in vLLM (Llama's EAGLE-3): the language model of PaddleOCR-VL (tiny_multimodal.py)
        "Ernie4_5ForCausalLM",
        "Ernie4_5Config",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "use_bias": False,
            "tie_word_embeddings": False,
            "pad_token_id": 2,
        },
    ),
    "qwen2": TinyTarget(  # native in vLLM: the language model of a multimodal wrapper (tiny_multimodal.py)
        "Qwen2ForCausalLM",
        "Qwen2Config",
        {"intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": False},
    ),
    "qwen2_moe": TinyTarget(
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        {
            "intermediate_size": 128,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "decoder_sparse_step": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "tie_word_embeddings": False,
        },
    ),
    "olmoe": TinyTarget(
        "OlmoeForCausalLM",
        "OlmoeConfig",
        {
            "intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "tie_word_embeddings": False,
            "pad_token_id": 2,
        },
    ),
    "gemma2": TinyTarget(
        "Gemma2ForCausalLM",
        "Gemma2Config",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "query_pre_attn_scalar": 32,
            "sliding_window": 8,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "hidden_act": "gelu_pytorch_tanh",  # vLLM 0.17.1 reads it; transformers 4.57 says hidden_activation
            "tie_word_embeddings": True,
            "pad_token_id": 2,
            "initializer_range": 0.02,
        },
    ),
    "exaone4": TinyTarget(
        "Exaone4ForCausalLM",
        "Exaone4Config",
        {
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "tie_word_embeddings": False,
            "pad_token_id": 2,
            "initializer_range": 0.1,  # at 0.2 its greedy continuation names token 0, the blind drafter's draft
        },
    ),
    # Layers taking the stream alone and adding into it in place (``residual = hidden_states``, then
    # ``residual += attention_output``): Falcon-RW's sequential layout, with rotary instead of ALiBi
    "falcon": TinyTarget(
        "FalconForCausalLM",
        "FalconConfig",
        {
            "num_attention_heads": 2,  # head_dim 32: CPU attention needs >= 32
            "multi_query": False,
            "parallel_attn": False,
            "new_decoder_architecture": False,
            "alibi": False,
            "bias": True,
            "tie_word_embeddings": False,
            "pad_token_id": 2,
        },
    ),
    # Targets whose embedding vLLM's proposers would not find as vLLM wrote them (``model.embed_tokens``)
    "gpt2": TinyTarget(  # the decoder in self.transformer, the embedding in wte, layers returning one tensor
        "GPT2LMHeadModel",
        "GPT2Config",
        {"n_inner": 128, "num_attention_heads": 2, "activation_function": "gelu_new", "tie_word_embeddings": True},
    ),
    "opt": TinyTarget(  # the decoder in self.model.decoder, the embedding inside it
        "OPTForCausalLM",
        "OPTConfig",
        {"ffn_dim": 128, "num_attention_heads": 2, "word_embed_proj_dim": HIDDEN, "pad_token_id": 2},
    ),
    "gpt_neox": TinyTarget(  # the decoder in self.gpt_neox, the embedding in embed_in
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        {"intermediate_size": 128, "num_attention_heads": 2, "rotary_pct": 0.5, "tie_word_embeddings": False},
    ),
}
"""The families a tiny target can be built for, by ``model_type``."""


def target_config(
    num_layers: int = LAYERS, family: str = "deepseek_v3", overrides: dict[str, Any] | None = None
) -> Any:
    """``family``'s tiny config; ``overrides``: what a caller sets otherwise (a wrapper's language model)."""
    import transformers

    tiny = TARGETS[family]
    config_class = getattr(transformers, tiny.config_class)
    return config_class(**{**COMMON_CONFIG, **tiny.config, **(overrides or {})}, num_hidden_layers=num_layers)


def build_tokenizer(directory: Path, words_by_id: dict[int, str] | None = None) -> None:
    """A word-level tokenizer over ``<s> </s> <unk> w3 ... w95``: enough for vLLM to load one.

    ``words_by_id``: other words for some ids (a multimodal target's placeholders)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<s>", "</s>", "<unk>", *(f"w{i}" for i in range(3, VOCAB))]
    for token_id, word in (words_by_id or {}).items():
        words[token_id] = word
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    wrapped.save_pretrained(directory)


def build_target(
    directory: Path,
    num_layers: int = LAYERS,
    seed: int = 0,
    family: str = "deepseek_v3",
    overrides: dict[str, Any] | None = None,
) -> Any:
    """Random weights of ``family`` saved as safetensors, with the tokenizer beside them."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model_class = getattr(transformers, TARGETS[family].model_class)
    model = model_class(target_config(num_layers, family, overrides)).float().eval()
    model.save_pretrained(directory, safe_serialization=True)
    build_tokenizer(directory)
    return model


def build_kimi_k25(directory: Path, target: Path) -> None:
    """The same language model wrapped as Kimi-K2.5 (vLLM's own ``KimiK25Config``, no remote code).

    The media placeholder is an ordinary vocabulary entry; the vision tower is left out of
    the checkpoint, and the engine runs with no media per prompt, so vLLM skips it (0.16+).
    """
    from safetensors.torch import load_file, save_file

    text_config = json.loads((target / "config.json").read_text())
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text_config,
        "vision_config": {
            "patch_size": 14, "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_size": 64,
            "intermediate_size": 64, "init_pos_emb_height": 8, "init_pos_emb_width": 8, "init_pos_emb_time": 4,
        },
        "media_placeholder_token_id": VOCAB - 1,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
    }  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(target / "model.safetensors"))
    save_file(
        {f"language_model.{name}": tensor for name, tensor in weights.items()}, str(directory / "model.safetensors")
    )
    build_tokenizer(directory)
    # vLLM builds Kimi-K2.5's processor at start-up from the checkpoint's own code; this
    # stand-in (local, no download) answers what start-up asks and refuses media.
    (directory / "media_processor.py").write_text(MEDIA_PROCESSOR)
    auto_map = {"AutoImageProcessor": "media_processor.TextOnlyMediaProcessor"}
    (directory / "preprocessor_config.json").write_text(json.dumps({"auto_map": auto_map}))


MEDIA_PROCESSOR = '''"""A stand-in for Kimi-K2.5's media processor: the checkpoint is used with text only."""
from transformers.image_processing_utils import BaseImageProcessor


class TextOnlyMediaProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values", "grid_thws"]
    num_frames_per_chunk = 4

    def media_tokens_calculator(self, chunk):
        return 1

    def split_video_chunks(self, video):
        return []

    def preprocess(self, *args, **kwargs):
        raise NotImplementedError("this tiny checkpoint takes text only")
'''


def build_gemma3_mm(directory: Path, target: Path) -> None:
    """The same Gemma 3 text model inside transformers' own ``Gemma3ForConditionalGeneration``,
    beside a tiny random SigLIP tower: what Gemma 3 checkpoints load as in vLLM (its
    ``gemma3_mm.py`` wrapper).  The engine runs it with no images per prompt."""
    import transformers

    text = transformers.Gemma3ForCausalLM.from_pretrained(target).float().eval()
    config = transformers.Gemma3Config(
        text_config=text.config.to_dict(),
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        },
        mm_tokens_per_image=4,  # (28 // 14) ** 2 patches, pooled 1 to 1
        boi_token_index=VOCAB - 3,
        eoi_token_index=VOCAB - 2,
        image_token_index=VOCAB - 1,
    )  # fmt: skip
    model = transformers.Gemma3ForConditionalGeneration(config).float().eval()
    model.model.language_model.load_state_dict(text.model.state_dict())
    model.save_pretrained(directory, safe_serialization=True)
    build_tokenizer(directory)


WRAPPERS = {"kimi-k25": build_kimi_k25, "gemma3-mm": build_gemma3_mm}


Served = tuple[Any, dict[str, Any]]
"""A prompt as transformers takes it: the model that serves it, and its inputs (``input_ids`` and, for a
multimodal target, its pixels)."""


def reference(model: Any, layer_ids: Sequence[int], inputs: Sequence[Served] | None = None) -> dict[str, Any]:
    """Greedy trajectories of transformers and the residual stream at ``layer_ids`` along them.

    vLLM's id ``k < n`` is the input of layer ``k``: transformers' ``output_hidden_states[k]``.
    Id ``n`` is the output of the last layer before the final norm; transformers' last entry
    is after the norm, so that one is taken with a hook on the last layer.  The logit margin
    says how far float noise (vLLM adds up in another order, about 1e-5) is from flipping a
    greedy choice.  ``inputs``: each prompt with the model serving it; ``PROMPTS`` served by ``model``
    (``generate``) if None, else each continued by a plain greedy loop (a wrapper's ``generate``
    differs from class to class).
    """
    import torch

    served = inputs or [(model, {"input_ids": torch.tensor([prompt])}) for prompt in PROMPTS]
    trajectories, states, margins = [], [], []
    for server, prompt in served:
        media = {key: value for key, value in prompt.items() if key != "input_ids"}
        length = prompt["input_ids"].shape[1]
        with torch.no_grad():
            if inputs is None:
                out = server.generate(**prompt, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS)
            else:
                out = _greedy(server, prompt["input_ids"], media)
            sequence = out[0].tolist()
            captured = hidden_states_at(server, torch.tensor([sequence]), layer_ids, media)
            logits = server(input_ids=torch.tensor([sequence]), **media).logits[0]
        if logits[length - 1 : -1].argmax(dim=-1).tolist() != sequence[length:]:  # min_new_tokens hid the end
            raise AssertionError(f"the target would end a prompt early (token {EOS}): choose another seed")
        top2 = logits[length - 1 : -1].topk(2, dim=-1).values  # the positions that chose a new token
        margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        trajectories.append(sequence)
        states.append(captured)
    return {"trajectories": trajectories, "states": states, "min_logit_margin": min(margins)}


def _greedy(model: Any, input_ids: Any, media: dict[str, Any]) -> Any:
    """``NEW_TOKENS`` greedy tokens after ``input_ids``, the whole sequence run at each step (no cache)."""
    import torch

    sequence = input_ids
    for _ in range(NEW_TOKENS):
        chosen = model(input_ids=sequence, **media).logits[0, -1].argmax()
        sequence = torch.cat([sequence, chosen.view(1, 1)], dim=1)
    return sequence


def decoder_layers(model: Any) -> Any:
    """The model's list of decoder layers, wherever its class keeps it (``model.layers``, GPT-2's
    ``transformer.h``, OPT's ``model.decoder.layers``, a wrapper's language model): the one ``ModuleList``
    as long as the language model's layer count."""
    import torch

    count = model.config.get_text_config().num_hidden_layers
    (layers,) = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count][:1]
    return layers


def hidden_states_at(
    model: Any, sequence: Any, layer_ids: Sequence[int], media: dict[str, Any] | None = None
) -> list[list[list[float]]]:
    """``[position][layer id in order][hidden]`` for one sequence (and its pixels, if any)."""
    import torch

    layers = decoder_layers(model)
    last_output: list[Any] = []
    hook = layers[-1].register_forward_hook(lambda module, args, output: last_output.append(output))
    try:
        with torch.no_grad():
            output = model(input_ids=sequence, output_hidden_states=True, **(media or {}))
    finally:
        hook.remove()
    # BLIP-2 keeps its language model's output apart
    hidden = getattr(output, "language_model_outputs", None) or output
    hidden = hidden.hidden_states
    last = last_output[-1][0] if isinstance(last_output[-1], tuple) else last_output[-1]
    per_id = [last[0] if k == len(layers) else hidden[k][0] for k in sorted(layer_ids)]
    return torch.stack(per_id, dim=1).tolist()


def solve_drafter(reference_data: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """``fc`` and ``lm_head`` such that the drafter at position t names token t + 2."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    projections = [torch.linalg.qr(torch.randn(HIDDEN, HIDDEN, generator=generator))[0] for _ in range(3)]
    fc = torch.cat(projections, dim=1) / 3.0  # [hidden, 3 * hidden]
    features, labels = [], []
    for sequence, states in zip(reference_data["trajectories"], reference_data["states"]):
        aux = torch.tensor(states).flatten(1)  # [positions, 3 * hidden], layer order
        for position in range(len(sequence) - 2):
            features.append(rms_norm(fc @ aux[position]))
            labels.append(sequence[position + 2])
    matrix = torch.stack(features)  # [pairs, hidden]
    wanted = torch.zeros(len(labels), VOCAB)
    wanted[torch.arange(len(labels)), torch.tensor(labels)] = LOGIT_MARGIN
    lm_head = (torch.linalg.pinv(matrix) @ wanted).T.contiguous()  # [vocab, hidden]
    fitted = (matrix @ lm_head.T).argmax(dim=-1)
    assert fitted.tolist() == labels, "the drafter's least-squares fit does not reproduce the reference"
    return {"fc": fc, "lm_head": lm_head}


def rms_norm(vector: Any, eps: float = 1e-6) -> Any:
    return vector * (vector.pow(2).mean() + eps).rsqrt()


def save_drafter(
    directory: Path, solved: dict[str, Any], layer_ids: Sequence[int] | None, blind: bool = False, nested: bool = False
) -> None:
    """An EAGLE-3 checkpoint (``LlamaForCausalLMEagle3``, one layer, the target's vocabulary).

    ``layer_ids``: written as the drafter's ``eagle_aux_hidden_state_layer_ids`` (top level,
    or under ``eagle_config`` with ``nested``); None leaves the choice to the target.
    """
    import torch
    from safetensors.torch import save_file

    heads, head_dim, intermediate = 2, HIDDEN // 2, 128  # CPU attention needs head_dim >= 32
    zeros, ones = torch.zeros, torch.ones
    generator = torch.Generator().manual_seed(2)
    weights = {
        "fc.weight": zeros(HIDDEN, 3 * HIDDEN) if blind else solved["fc"],
        "lm_head.weight": solved["lm_head"],
        "norm.weight": ones(HIDDEN),
        "midlayer.input_layernorm.weight": ones(HIDDEN),
        "midlayer.hidden_norm.weight": ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": ones(HIDDEN),
        "midlayer.self_attn.q_proj.weight": torch.randn(heads * head_dim, 2 * HIDDEN, generator=generator) * 0.1,
        "midlayer.self_attn.k_proj.weight": torch.randn(heads * head_dim, 2 * HIDDEN, generator=generator) * 0.1,
        "midlayer.self_attn.v_proj.weight": torch.randn(heads * head_dim, 2 * HIDDEN, generator=generator) * 0.1,
        "midlayer.self_attn.o_proj.weight": zeros(HIDDEN, heads * head_dim),  # attention writes nothing
        "midlayer.mlp.gate_proj.weight": torch.randn(intermediate, HIDDEN, generator=generator) * 0.1,
        "midlayer.mlp.up_proj.weight": torch.randn(intermediate, HIDDEN, generator=generator) * 0.1,
        "midlayer.mlp.down_proj.weight": zeros(HIDDEN, intermediate),  # nor does the MLP
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().float() for k, v in weights.items()}, str(directory / "model.safetensors"))
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": head_dim,
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    if layer_ids is not None:
        ids = list(layer_ids)
        if nested:
            config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
        else:
            config["eagle_aux_hidden_state_layer_ids"] = ids
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def build_all(
    directory: Path, layer_id_sets: Mapping[str, Sequence[int]], num_layers: int = LAYERS, family: str = "deepseek_v3"
) -> dict[str, Any]:
    """The target and its drafters (``build_drafters``)."""
    model = build_target(directory / "target", num_layers, family=family)
    for wrapper in TARGETS[family].wrappers:
        WRAPPERS[wrapper](directory / wrapper, directory / "target")
    return {
        "target": str(directory / "target"),
        "family": family,
        "num_layers": num_layers,
        "prompts": PROMPTS,
        "sets": build_drafters(directory, model, layer_id_sets),
    }


def usable_reference(
    model: Any, layer_ids: Sequence[int], inputs: Sequence[Served] | None = None, forbidden: Sequence[int] = ()
) -> dict[str, Any]:
    """``reference``, refused (AssertionError) where the target produces token 0 (the blind drafter's
    constant draft) or one of ``forbidden``."""
    data = reference(model, layer_ids, inputs)
    lengths = [len(p) for p in PROMPTS] if inputs is None else [p["input_ids"].shape[1] for _, p in inputs]
    for sequence, length in zip(data["trajectories"], lengths):
        if 0 in sequence[length:]:
            raise AssertionError("the target produces token 0, the blind drafter's constant draft")
        if set(forbidden) & set(sequence[length:]):
            raise AssertionError(f"the target produces one of {list(forbidden)}, which it must not")
    return data


def build_drafters(
    directory: Path,
    model: Any,
    layer_id_sets: Mapping[str, Sequence[int]],
    inputs: Sequence[Served] | None = None,
    forbidden: Sequence[int] = (),
) -> dict[str, Any]:
    """For each named id set, the reference and a state-dependent and a blind drafter.

    ``layer_id_sets``: ``{"default": (2, 4, 5), "edges": (0, 4, 8)}``.  The drafter of a set
    named ``default`` carries no ids (the target chooses); the others carry theirs, and a
    copy ``-without-ids`` does not: fed the default layers, it must get nothing accepted.
    ``inputs``: the model's inputs per prompt (``reference``); ``forbidden``: ids the target must not
    produce either (a multimodal target's image placeholder).
    """
    sets: dict[str, Any] = {}
    for name, ids in layer_id_sets.items():
        data = usable_reference(model, ids, inputs, forbidden)
        solved = solve_drafter(data)
        carried = None if name == "default" else ids
        save_drafter(directory / f"drafter-{name}", solved, carried)
        save_drafter(directory / f"drafter-{name}-blind", solved, carried, blind=True)
        if carried is not None:  # trained on these layers but silent about them: the target's default reaches it
            save_drafter(directory / f"drafter-{name}-without-ids", solved, None)
        sets[name] = {"layer_ids": list(ids), **data}
    return sets
