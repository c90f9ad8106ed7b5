"""Proof: BA keeps every w-window within ε (Kellaris et al. 2014, Theorem 5).

Covers: mechanisms.rules.BARule and mechanisms.rules.ba_shares, executed by mechanisms.ba.BA.run
(both settings of dissimilarity_when_nullified).
Invariant (see BARule's docstring): 1 <= k <= w, 1 <= a <= 2w; with S_m the publication budget of
the last m timestamps: S_m = 0 for m < a, S_m <= u·(m − a + k) otherwise, S_{w−1} <= u·w; every
recent total <= u + its publication budget. The queries are scale-invariant, so they are solved
with u = 1 and stay linear (proofs/README.md): w = 128 takes about 1.5 s.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.rules import BARule

if __name__ == "__main__":
    ok = run(BARule(), "BA")
    ok = run(BARule(dissimilarity_when_nullified=False), "BA (no dissimilarity when nullified)") and ok
    sys.exit(0 if ok else 1)
