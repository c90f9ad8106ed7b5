"""Proof: BD keeps every w-window within ε (Kellaris et al. 2014, Theorem 4).

Covers: mechanisms.rules.BDRule and mechanisms.rules.bd_candidate, executed by
mechanisms.bd.BD.run (dissimilarity share(ε, 2w) at every t; publication
(share(ε, 2) − Σ recent publications)/2 when the free decision says publish).
Invariant: the last w − 1 publication budgets are >= 0 and sum to <= share(ε, 2); every recent
total <= share(ε, 2w) + its publication budget.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.rules import BDRule

if __name__ == "__main__":
    sys.exit(0 if run(BDRule(), "BD") else 1)
