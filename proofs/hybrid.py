"""Proof: Hybrid (every x-th timestamp) keeps every w-window within ε (Schäler et al. 2022, §3).

Covers: mechanisms.rules.PeriodicRule(every=x), executed by mechanisms.hybrid.Hybrid.run: share(ε,
⌈w/x⌉) at every t with (t − 1) mod x = 0. The default x = 2 is proved here; `--every X` proves another.
Invariant: with c = (t − 1) mod x for the next t, a recent timestamp of age a spent at most the
share if a ≡ c (mod x), else nothing.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.hybrid import Hybrid

if __name__ == "__main__":
    sys.exit(0 if run(Hybrid().allocation_rule(), "Hybrid") else 1)
