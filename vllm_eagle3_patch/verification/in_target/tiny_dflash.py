"""A tiny DFlash drafter (vLLM's ``DFlashDraftModel``, ``model_executor/models/qwen3_dflash.py``) whose drafts
depend on the target's hidden states, beside a tiny target of ``tiny_models.TARGETS`` and transformers' reference.
Executed as a script in the interpreter that has vLLM (torch, transformers and safetensors come with it):

    python tiny_dflash.py DIR --family MODEL_TYPE --target-layer-ids 1,3,5

DFlash drafts a block at once: the target's states at ``dflash_config.target_layer_ids`` ("the output of layer
i", so vLLM's runners hand over ids i + 1) go through ``fc`` and ``hidden_norm`` into the drafter's KV cache as
context, and the queries are the bonus token and ``num_speculative_tokens`` copies of the mask token, each
position drafting its own token.  One speculative token: the mask query at position t + 1 drafts the token
there, after the bonus token at t and the context up to t - 1.

How it is made to depend on those states only, as ``tiny_models``' EAGLE-3 drafter is: its own token embedding
is zero (so every query reads nothing of its token, and its query, key and value are zero), the context's key
projection is zero (so every attention score is zero), and its one layer attends a sliding window of three
(``dflash_config.use_swa``): the mask query's window holds the last context position t - 1 (the target's states
there), the bonus and itself, averaged.  The value and output projections are the identity and the MLP writes
nothing, so its logits are ``lm_head(norm(fc(aux states at t - 1)))``: exactly the EAGLE-3 drafter's
(``tiny_models.solve_drafter``, position s naming token s + 2), solved on transformers' states at the ids vLLM
hands over.  The blind copy has a zero ``fc``: zero logits, token 0 drafted, which the target never produces.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiny_models

MASK_TOKEN_ID = tiny_models.VOCAB - 1
WINDOW = 3
"""The mask query's sliding window: the last context position, the bonus token, itself."""
HEADS, HEAD_DIM, INTERMEDIATE = 2, tiny_models.HIDDEN // 2, 128  # CPU attention needs head_dim >= 32
SHIFT = 1
"""What vLLM adds to ``dflash_config.target_layer_ids`` (DFlash names layer outputs, vLLM layer inputs): the
reference computes the states at both, and the engine test says which the release handed over."""


def save_drafter(directory: Path, solved: dict[str, Any], target_layer_ids: Sequence[int], blind: bool = False) -> None:
    """A DFlash checkpoint: one Qwen3-style layer, weights named as DFlash checkpoints name them (vLLM prefixes
    ``model.``), its own zero embedding and its own solved ``lm_head``."""
    import torch
    from safetensors.torch import save_file

    hidden = tiny_models.HIDDEN
    eye, zeros, ones = torch.eye, torch.zeros, torch.ones
    weights = {
        "embed_tokens.weight": zeros(tiny_models.VOCAB, hidden),
        "fc.weight": zeros(hidden, len(target_layer_ids) * hidden) if blind else solved["fc"],
        "hidden_norm.weight": ones(hidden),
        "norm.weight": ones(hidden),
        "lm_head.weight": solved["lm_head"],
        "layers.0.input_layernorm.weight": ones(hidden),
        "layers.0.post_attention_layernorm.weight": ones(hidden),
        "layers.0.self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, hidden),
        "layers.0.self_attn.k_proj.weight": zeros(HEADS * HEAD_DIM, hidden),  # every score zero: a plain average
        "layers.0.self_attn.v_proj.weight": eye(HEADS * HEAD_DIM, hidden),
        "layers.0.self_attn.o_proj.weight": eye(hidden, HEADS * HEAD_DIM),
        "layers.0.self_attn.q_norm.weight": ones(HEAD_DIM),
        "layers.0.self_attn.k_norm.weight": ones(HEAD_DIM),
        "layers.0.mlp.gate_proj.weight": zeros(INTERMEDIATE, hidden),
        "layers.0.mlp.up_proj.weight": zeros(INTERMEDIATE, hidden),
        "layers.0.mlp.down_proj.weight": zeros(hidden, INTERMEDIATE),  # the MLP writes nothing
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().float() for k, v in weights.items()}, str(directory / "model.safetensors"))
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": tiny_models.VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "block_size": 2,  # one bonus query and one mask query: num_speculative_tokens 1
        "dflash_config": {
            "mask_token_id": MASK_TOKEN_ID,
            "target_layer_ids": list(target_layer_ids),
            "use_swa": True,
            "swa_window_size": WINDOW,
        },
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def build_all(directory: Path, family: str, target_layer_ids: Sequence[int], num_layers: int) -> dict[str, Any]:
    """The target, the state-dependent drafter (solved on the states at ``target_layer_ids`` + 1, what vLLM's
    V1 runner hands over from 0.22.0) and its blind copy; the reference at both ``target_layer_ids`` + 1
    (``outputs``) and ``target_layer_ids`` (``inputs``: what a runner without the +1 hands over)."""
    import torch

    model = tiny_models.build_target(directory / "target", num_layers, family=family)
    outputs = [i + SHIFT for i in target_layer_ids]
    data = tiny_models.usable_reference(model, outputs)
    solved = tiny_models.solve_drafter(data)
    save_drafter(directory / "dflash", solved, target_layer_ids)
    save_drafter(directory / "dflash-blind", solved, target_layer_ids, blind=True)
    inputs = {
        **data,
        "states": [
            tiny_models.hidden_states_at(model, torch.tensor([t]), target_layer_ids) for t in data["trajectories"]
        ],
    }
    return {
        "target": str(directory / "target"),
        "family": family,
        "num_layers": num_layers,
        "prompts": tiny_models.PROMPTS,
        "dflash_config": {"target_layer_ids": list(target_layer_ids), "mask_token_id": MASK_TOKEN_ID},
        "sets": {"outputs": {"layer_ids": outputs, **data}, "inputs": {"layer_ids": list(target_layer_ids), **inputs}},
    }


def main(argv: list[str]) -> dict[str, Any]:
    if len(argv) < 1:
        raise SystemExit("usage: tiny_dflash.py DIR [--family MODEL_TYPE] [--target-layer-ids 1,3,5] [--layers N]")
    options = dict(zip(argv[1::2], argv[2::2]))
    directory = Path(argv[0])
    ids = [int(i) for i in options.get("--target-layer-ids", "1,3,5").split(",")]
    summary = build_all(
        directory,
        options.get("--family", "qwen2_moe"),
        ids,
        int(options.get("--layers", tiny_models.LAYERS)),
    )
    (directory / "reference.json").write_text(json.dumps(summary))
    sets = {name: chosen["layer_ids"] for name, chosen in summary["sets"].items()}
    return {"built": str(directory), "family": summary["family"], "sets": sets}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
