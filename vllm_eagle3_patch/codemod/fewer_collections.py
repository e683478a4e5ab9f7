"""Fewer garbage collections while a command runs.

Parsing a model file builds a tree of some hundred thousand objects (the standard library's, then
LibCST's), and none of them is in a reference cycle, so the cyclic collector finds nothing to free in
them.  It is triggered by allocations all the same: with the default threshold (700) it runs thousands of
times during ``apply`` and walks the live trees each time, a tenth of the command's CPU.  mypy, which
parses as much, does the same: a higher first threshold, and the objects alive before the work (the
modules imported) set aside for good, so the collections that still run never walk them.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

ALLOCATIONS = 100_000
"""Allocations (less deallocations) between two collections of the youngest generation."""


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the body with the collector's first threshold at :data:`ALLOCATIONS` and the objects alive now
    frozen; the interpreter's settings come back after it (the tests run commands in one process)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(ALLOCATIONS, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
