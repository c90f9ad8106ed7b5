"""Proof: DSAT_w, made sound, keeps every w-window within ε (Li et al. 2015; accounting rules §4-5).

Covers: mechanisms.rules.DistanceTestRule (rate 0.01), executed by mechanisms.dsat.DSATw.run: with
u = share(ε, 10w²), the private row count w²·u once at t = 1, a distance test 9(w − C)·u at every
t, and a sample 9w·u when the free decision asks for one and fewer than C = ⌈0.01·w⌉ samples are
in the window.
Invariant: a = min(t − 1, w); sample flags in {0, 1}, at most C of them, 0 before t = 1; every
recent total <= test + flag·sample (+ the count at age a).
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.dsat import DSATw

if __name__ == "__main__":
    sys.exit(0 if run(DSATw().allocation_rule(), "DSATw") else 1)
