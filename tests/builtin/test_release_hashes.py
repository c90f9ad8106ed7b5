"""Every built-in's releases, bit for bit, at fixed seeds (reproducible noise by name): a move or
an optimisation of the code must not change one released value. The hashes in
``tests/data/release_hashes.json`` were taken before the layout move and have held since; numpy
may change its generators' streams between feature releases, so they are keyed by its version.
Regenerate (only for a deliberate change, said in the commit) with ``python tests/builtin/test_release_hashes.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from mechanisms import BUILTIN

pytestmark = pytest.mark.bitwise  # CI runs these again on numpy's baseline kernels
DATA = Path(__file__).parents[1] / "data" / "release_hashes.json"
EPSILONS = (0.5, 2.0)


def _digest(values: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(values, dtype=np.float64)).tobytes()).hexdigest()[:16]


def releases(name: str, epsilon: float) -> str:
    """The hash of ``name``'s releases on a fixed stream with a jump (decisions flip), d = 3, 3 runs."""
    rng = np.random.default_rng(2026)
    counts = rng.poisson(30, size=(48, 3)).astype(float)
    counts[20:26] += 200
    users = rng.integers(0, 3, size=(48, 40))
    mechanism = BUILTIN[name]()
    notion = getattr(mechanism, "notion", "w-event")
    if notion == "personalized":
        requirements = bc.RequirementSet([bc.Requirement(4, 0.5)] * 20 + [bc.Requirement(8, 1.0)] * 20)
        run = bc.execute_personalized(mechanism, requirements, users, dimensions=3, runs=3, seed=11)
    elif notion == "swellfish":
        policies = bc.PolicyCollection([bc.StreamPolicy(3, 10, [1.0]), bc.StreamPolicy(12, 30, [2.0, 1.0])])
        run = bc.execute_swellfish(mechanism, policies, counts, epsilon=epsilon, runs=3, seed=11)
    else:
        run = bc.execute(mechanism, counts, epsilon=epsilon, w=6, runs=3, seed=11)
    return _digest(run.releases)


def _stored() -> dict[str, Any]:
    return dict(json.loads(DATA.read_text(encoding="utf-8")))


def _numpy() -> str:
    return ".".join(np.__version__.split(".")[:2])


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_builtin_releases_what_it_released_before(name: str) -> None:
    stored = _stored()
    if stored["numpy"] != _numpy():
        pytest.skip(f"hashes taken with numpy {stored['numpy']}, running {_numpy()}: its generators may differ")
    for epsilon in EPSILONS:
        assert releases(name, epsilon) == stored["releases"][f"{name}@{epsilon}"], (name, epsilon)


def test_every_builtin_is_covered() -> None:
    assert {key.split("@")[0] for key in _stored()["releases"]} == set(BUILTIN)


if __name__ == "__main__":
    table = {f"{name}@{epsilon}": releases(name, epsilon) for name in sorted(BUILTIN) for epsilon in EPSILONS}
    DATA.write_text(
        json.dumps({"numpy": _numpy(), "releases": table}, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    sys.stdout.write(f"{len(table)} hashes written to {DATA}\n")
