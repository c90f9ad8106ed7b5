"""What a benchmark worker process does once, before its first batch (a ``ProcessPoolExecutor``
initializer).

A forked worker inherits the parent's Python objects, and its first compiled kernel imports
numba's lowering registries (tens of thousands more objects). Every full collection then walks
all of them, and on a forked worker each walk writes to pages shared with the parent, which the
kernel copies.
:func:`start_worker` loads the registries first, then moves every object alive to the collector's
permanent generation (``gc.freeze``), so later collections walk only what the batches create.
"""

from __future__ import annotations

import gc

import numpy as np

from budgetcheck.bench.memory import keep_freed_memory
from budgetcheck.ledger.noise import laplace_draws


def start_worker() -> None:
    """Tune the allocator, load the compiled kernels' runtime, then freeze what is alive."""
    keep_freed_memory()
    laplace_draws(np.random.default_rng(0), (1,))  # the first kernel call imports numba's registries
    gc.freeze()
