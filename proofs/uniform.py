"""Proof: Uniform keeps every w-window within ε (Kellaris et al. 2014, §3).

Covers: mechanisms.rules.PeriodicRule(every=1) (charges share(ε, w) at every t), executed by
mechanisms.uniform.Uniform.run.
Invariant: every recent total <= u = share(ε, w); then w·u <= ε.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.rules import PeriodicRule

if __name__ == "__main__":
    sys.exit(0 if run(PeriodicRule(every=1), "Uniform") else 1)
