"""Proof: FAST_w keeps every w-window within ε (Kellaris et al. 2014, §3; Fan & Xiong 2014).

Covers: mechanisms.rules.BlockRule (sampling ratio 0.15), executed by mechanisms.fast.FASTw.run:
disjoint blocks of w timestamps, at most M = max(1, ⌊0.15·w⌋) samples of share(ε, 2M) per block,
one budget shared by every column (the max rule). The PID controller's "sample now" is the free
decision.
Invariant: 0 <= j < w, 0 <= m <= M; every recent total in [0, u]; the recent totals of the current
block sum to at most m·u and the older ones to at most M·u.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.fast import FASTw

if __name__ == "__main__":
    sys.exit(0 if run(FASTw().allocation_rule(), "FASTw") else 1)
