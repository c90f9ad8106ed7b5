"""Proof: Sample keeps every w-window within ε (Kellaris et al. 2014, §3).

Covers: mechanisms.rules.PeriodicRule() (period w: ε at t with (t − 1) mod w = 0), executed by
mechanisms.sample.Sample.run.
Invariant: with c = (t − 1) mod w for the next t, of the last w − 1 timestamps only the one of
age c spent anything, and at most ε.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.rules import PeriodicRule

if __name__ == "__main__":
    sys.exit(0 if run(PeriodicRule(), "Sample") else 1)
