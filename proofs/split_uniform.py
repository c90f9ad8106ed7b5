"""Proof: AdaPub and PeGaSus keep every w-window within ε (Kellaris-style ε/w per timestamp).

Covers: mechanisms.rules.SplitUniformRule((4, 1)), executed by mechanisms.adapub.AdaPub.run and
mechanisms.pegasus.PeGaSus.run: with u = share(ε, 5w), 4u for the perturbation and u for the
grouping or clustering test at every timestamp. Their data-dependent choices (groups, clusters,
smoothing) change values, not budgets.
Invariant: every recent total is in [0, 5u].
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.adapub import AdaPub
from mechanisms.pegasus import PeGaSus

if __name__ == "__main__":
    ok = run(AdaPub().allocation_rule(), "AdaPub")  # the same weights; the purposes' names differ
    ok = run(PeGaSus().allocation_rule(), "PeGaSus") and ok
    sys.exit(0 if ok else 1)
