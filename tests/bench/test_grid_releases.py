"""The benchmark grid's releases, bit for bit, on its own multi-run path: stacked streams, several ε
in one ledger (``WindowLedger.with_epsilons``), the numpy sampler, as ``budgetcheck bench`` runs
them. ``test_release_hashes.py`` pins every built-in on one small stream; this pins the path whose
fixed cost per timestep the grid pays (issue 32), so an optimisation of it cannot change a value.

The hashes in ``tests/data/grid_release_hashes.json`` were taken with the code before that work;
numpy may change its generators' streams between feature releases, so they are keyed by its
version. Regenerate (only for a deliberate change, said in the commit) with
``python tests/bench/test_grid_releases.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from budgetcheck.bench import Benchmark
from budgetcheck.bench.runner import batch_releases

pytestmark = pytest.mark.bitwise  # CI runs these again on numpy's baseline kernels
DATA = Path(__file__).parents[1] / "data" / "grid_release_hashes.json"
STREAMS = ("s40-a10", "s60-a10", "s80-a10")  # three of the 20 artificial streams, stacked
EPSILONS = (0.1, 1.0)  # vary-ε at w = 120 (one ledger of two ε for the stacking mechanisms); ε = 1 at w = 40


def _grid() -> Benchmark:
    return Benchmark.paper(real=(), runs=2).select(streams=STREAMS, epsilons=EPSILONS, ws=(40, 120))


def _digest(blocks: list[Any]) -> str:
    sha = hashlib.sha256()
    for block in blocks:
        sha.update(np.ascontiguousarray(np.asarray(block, dtype=np.float64)).tobytes())
    return sha.hexdigest()[:16]


def grid_hashes(mechanism: str) -> dict[str, str]:
    """{batch: hash of its releases} for every batch of ``mechanism`` in the small grid."""
    grid = _grid()
    batches = dict.fromkeys(grid.batch(cell) for cell in grid.cells() if cell.mechanism == mechanism)
    return {
        f"{mechanism}@w={batch.w}@eps={','.join(map(repr, batch.epsilons))}": _digest(batch_releases(grid, batch))
        for batch in batches
    }


def _stored() -> dict[str, Any]:
    return dict(json.loads(DATA.read_text(encoding="utf-8")))


def _numpy() -> str:
    return ".".join(np.__version__.split(".")[:2])


@pytest.mark.parametrize("mechanism", Benchmark.paper(real=()).mechanisms)
def test_every_grid_batch_releases_what_it_released_before(mechanism: str) -> None:
    stored = _stored()
    if stored["numpy"] != _numpy():
        pytest.skip(f"hashes taken with numpy {stored['numpy']}, running {_numpy()}: its generators may differ")
    hashes = grid_hashes(mechanism)
    assert hashes, f"no batch of {mechanism} in the grid"
    expected = {key: value for key, value in stored["releases"].items() if key.split("@")[0] == mechanism}
    assert hashes == expected


if __name__ == "__main__":
    table = {key: value for name in Benchmark.paper(real=()).mechanisms for key, value in grid_hashes(name).items()}
    DATA.write_text(
        json.dumps({"numpy": _numpy(), "releases": table}, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    sys.stdout.write(f"{len(table)} hashes written to {DATA}\n")
