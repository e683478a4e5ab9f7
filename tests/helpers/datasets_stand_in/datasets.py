"""A stand-in for Hugging Face ``datasets`` (whose pyarrow is too big for the training interpreter): what
speculators 0.9.0's offline data reads of it, ``load_from_disk`` of the rows ``train_eagle3.py`` writes.

Put first on ``PYTHONPATH`` of the training process only (``tests/engine/test_training_engine.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

ROWS = "rows.pt"
"""Each sample's ``input_ids``, ``loss_mask`` and ``seq_len``, as ``datasets.save_to_disk`` would keep them."""


class Dataset:
    """The part of ``datasets.Dataset`` speculators uses: length, rows, a column, a selection."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: int | str) -> Any:
        return [row[key] for row in self.rows] if isinstance(key, str) else self.rows[key]

    def select(self, indices: Any) -> Dataset:
        return Dataset([self.rows[i] for i in indices])

    def with_format(self, *args: Any, **kwargs: Any) -> Dataset:
        return self


def load_from_disk(path: str | Path) -> Dataset:
    return Dataset(torch.load(Path(path) / ROWS, weights_only=False))


def load_dataset(*args: Any, **kwargs: Any) -> Dataset:
    raise NotImplementedError("the datasets stand-in reads rows written to disk only (load_from_disk)")


def concatenate_datasets(datasets: list[Dataset], *args: Any, **kwargs: Any) -> Dataset:
    return Dataset([row for dataset in datasets for row in dataset.rows])
