"""``verify --report``: the window sums of the worst run found, against ε, violations marked."""

from __future__ import annotations

import base64
import io
from fractions import Fraction
from pathlib import Path

import numpy as np

from budgetcheck._errors import BudgetExceeded, SecretAccess
from budgetcheck._ledger import WindowLedger
from budgetcheck._params import WEventParams
from budgetcheck._stream import GuardedStream
from budgetcheck._verify import VerifyResult, load_mechanism
from budgetcheck.strategies import VerificationCase


def _window_sums(ledger: WindowLedger, run: int, w: int) -> list[float]:
    horizon = max((r.t for r in ledger.records), default=0)
    totals = [Fraction(0)] * (horizon + 1)
    for record in ledger.records:
        totals[record.t] += Fraction(float(record.amounts[run]))
    return [float(sum(totals[max(1, end - w + 1) : end + 1])) for end in range(1, horizon + 1)]


def write_report(result: VerifyResult, case: VerificationCase, path: Path) -> None:
    """Replay ``case`` and plot every window sum of its heaviest run; PNG, or HTML around a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mechanism = load_mechanism(result.reference)
    ledger = WindowLedger(WEventParams(case.epsilon, case.w), runs=case.runs, seed=case.seed)
    stream = GuardedStream(case.data)
    ledger.bind(stream)
    refusal: BudgetExceeded | None = None
    stopped = ""
    try:
        mechanism.run(stream, ledger)
    except BudgetExceeded as exc:
        refusal = exc
    except SecretAccess as exc:  # the stage (b) failure; plot what was spent before it
        stopped = f"; stopped at a secret access: {str(exc).split(':')[0]}"
    runs = [_window_sums(ledger, r, case.w) for r in range(case.runs)]
    run = refusal.run if refusal is not None else int(np.argmax([max(s, default=0.0) for s in runs]))
    sums = runs[run]
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=110)
    axes.step(range(1, len(sums) + 1), sums, where="mid", label=f"Σ ε over window [t−{case.w}+1, t], run {run}")
    axes.axhline(case.epsilon, color="black", linestyle="--", label=f"ε = {case.epsilon:g}")
    if refusal is not None:
        axes.scatter([refusal.window[1]], [refusal.window_sum], color="red", zorder=3, label="refused spend (violation)")
        axes.annotate(f"window {list(refusal.window)} would sum to {refusal.window_sum:.4g}", (refusal.window[1], refusal.window_sum),
                      textcoords="offset points", xytext=(-8, 6), ha="right", color="red")
    axes.set_xlabel("timestamp t")
    axes.set_ylabel("window sum of ε_t")
    axes.set_title(f"budgetcheck verify {result.reference}: {result.verdict} (w = {case.w}, {case.kind} stream, d = {case.data.shape[1]}){stopped}")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower right")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    if path.suffix.lower() == ".html":
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        stages = "".join(f"<li><b>{s.stage}</b>: {s.verdict} — {s.detail}</li>" for s in result.stages)
        path.write_text(f"<!doctype html><title>budgetcheck verify</title><h1>{result.reference}: {result.verdict}</h1>"
                        f"<ul>{stages}</ul><img src='data:image/png;base64,{encoded}'>", encoding="utf-8")
    else:
        path.write_bytes(buffer.getvalue())
