"""Proof: the Swellfish mechanisms keep every relevance interval's TOP_δ(J) sum within ε
(Tex, Schäler, Böhm, composition theorem).

Covers:
- TSUniform, TSSample, TSBD, TSBA (mechanisms.swellfish.TemporalSensitivity): the w-event rules
  (PeriodicRule, BDRule, BARule) with w = max |J| and noise scaled by Δ_Q^t. The TOP_δ(J) sum of an
  interval J is at most the sum over J, and |J| <= w, so it is at most a window sum, which the rule's
  w-event proof bounds by ε.
- UnicornIS, UnicornPS, Unicorn, TINARUniform, TINARSample: no transition system; an exhaustive,
  exact check of the composition theorem on the mechanisms' own budget code (`bounded_proof`):
  every collection of at most 2 policies with intervals in [1, 5] and patterns of length 1-2 (325
  collections), every publish/skip sequence, ε = 1 in Fractions (budgets are homogeneous of degree
  1 in ε). This is a bounded proof, stated as such.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.swellfish import (
    TSBA,
    TSBD,
    TINARSample,
    TINARUniform,
    TSSample,
    TSUniform,
    Unicorn,
    UnicornIS,
    UnicornPS,
)

if __name__ == "__main__":
    ok = True
    for mechanism in (TSUniform(), TSSample(), TSBD(), TSBA()):
        ok = run(mechanism.allocation_rule(), mechanism.name) and ok
    for bounded in (UnicornIS(), UnicornPS(), Unicorn(), TINARUniform(), TINARSample()):
        holds, count, failure = bounded.bounded_proof()
        print(
            f"{bounded.name}: {'proved' if holds else 'refuted'} on {count} collections (exhaustive, exact) {failure}"
        )
        ok = holds and ok
    sys.exit(0 if ok else 1)
