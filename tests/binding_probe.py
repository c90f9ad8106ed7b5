"""Whether a stream is bound: the probe the outside attacks use to see that a refusal unbound nothing."""

from __future__ import annotations

import budgetcheck as bc


def bound_elsewhere(stream: bc.GuardedStream) -> bool:
    """Whether some ledger holds the stream: a fresh ledger's bind is then refused."""
    try:
        bc.WindowLedger(epsilon=1.0, w=3, seed=1, sampler="numpy-laplace").bind(stream)
    except bc.SecretAccess:
        return True
    return False
