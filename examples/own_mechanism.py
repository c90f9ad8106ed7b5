"""Write your own w-event mechanism against the ledger, then verify and audit it.

EveryKth samples every k-th timestamp (the Uniform-Sample hybrid of Schäler et al. 2022): a window
of w timestamps holds at most ceil(w/k) sampling points, so each gets ε / ceil(w/k).
"""

from __future__ import annotations

import math

import attrs
import numpy as np
from numpy.typing import NDArray

import budgetcheck
from budgetcheck import GuardedStream, WindowLedger, rounding


@attrs.frozen
class EveryKth:
    k: int = 4
    name: str = "EveryKth"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        params = ledger.params
        budget = rounding.share(params.epsilon, math.ceil(params.w / self.k))  # rounded down: never refused
        releases = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:  # each secret is opaque: only the ledger can read it, and it charges first
            if (secret.t - 1) % self.k == 0:
                last = ledger.laplace(secret, budget, purpose="publication")
            releases[:, secret.t - 1] = last
        return releases


def main() -> None:
    counts = 100 + 50 * np.sin(np.arange(200) / 10)[:, None] * np.ones((1, 3))
    execution = budgetcheck.execute(EveryKth(), counts, epsilon=1.0, w=20, runs=10, seed=42)
    mae = float(np.abs(execution.releases - counts).mean())
    report = budgetcheck.audit_windows(execution.ledger.records, epsilon=1.0, w=20, runs=10)
    print(f"EveryKth: MAE {mae:.2f}, worst window {float(report.worst_ratio):.4f} of epsilon, audit ok={report.ok}")
    assert report.ok

    result = budgetcheck.verify_mechanism("own_mechanism:EveryKth", examples=50)
    print(f"verify: {'pass' if result.passed else 'FAIL'} over {result.examples} generated streams")
    assert result.passed


if __name__ == "__main__":
    main()
