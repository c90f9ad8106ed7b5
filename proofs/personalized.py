"""Proof: PBD, PBA and the strictest-requirement baselines keep every user's w_i-window within ε_i
(Du et al. 2025, Theorems on PBD/PBA; personalized w-event privacy).

Covers: mechanisms.personalized.personalized_releases, which runs mechanisms.rules.BDRule (PBD,
StrictestBD) or mechanisms.rules.BARule (PBA, StrictestBA) once per requirement class c with
RuleEnv(ε_c, w_c) and passes every class the decision `publish`; the PersonalizedLedger charges
each user their class's spends.
Why the w-event proof of each rule is the personalized proof: users of a class get identical
budgets, so a user's windows are their class's windows; the class's rule runs with its own
(w_c, ε_c), and ε is symbolic and w ranges over 1..w_max here. PBA's cross-class nullification
(t̃_N = max over classes) only turns a class's publish into a skip, which is one of the decision
sequences BARule's proof covers; the spent amounts are the rule's budgets or 0, which the proof's
"0 <= spent <= budget" covers.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.personalized import PBA, PBD

if __name__ == "__main__":
    ok = run(PBD().allocation_rule(), "PBD (per class)")
    ok = run(PBA().allocation_rule(), "PBA (per class)") and ok
    sys.exit(0 if ok else 1)
