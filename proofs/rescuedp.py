"""Proof: RescueDP, made sound, keeps every w-window within ε (Wang et al. 2016, §IV-C).

Covers: mechanisms.rules.RemainingFractionRule, executed by mechanisms.rescuedp.RescueDP.run: a
location's budget is min(p·ε_rm, ε/5) with p <= 0.6 and ε_rm the window remainder *shared* by all
locations; the ledger charges the maximum over locations (the max rule), which is at most the rule's
grant. Whether anything is published at t is the free decision.
Invariant: the w − 1 recent totals are >= 0 and sum to <= ε.
Assumptions: see proofs/README.md.
"""

from __future__ import annotations

import sys

from _common import run

from mechanisms.rescuedp import RescueDP

if __name__ == "__main__":
    sys.exit(0 if run(RescueDP().allocation_rule(), "RescueDP") else 1)
