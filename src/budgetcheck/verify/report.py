"""``verify --report``: the budget use of the worst run found against ε (per requirement class or
per relevance interval where the notion has them), violations marked."""

from __future__ import annotations

import base64
import io
from fractions import Fraction
from pathlib import Path

import numpy as np

import attrs

from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import BudgetExceeded, SecretAccess
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.stream.guarded import GuardedStream, PersonalizedStream
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.verify.stages import AnyCase, VerifyResult, load_mechanism
from budgetcheck.strategies import PersonalizedCase, SwellfishCase


@attrs.frozen
class _Curve:
    """Budget used over time against the bound that applies, as a fraction of its ε."""

    label: str
    ratios: tuple[float, ...]  # at t = first, first + 1, ...
    first: int = 1


def _totals(ledger: LedgerCore, run: int, columns: int) -> list[list[Fraction]]:
    """Exact per-timestamp totals of one run, per column (a requirement class, or one column)."""
    horizon = max((r.t for r in ledger.records), default=0)
    totals = [[Fraction(0)] * (horizon + 1) for _ in range(columns)]
    for record in ledger.records:
        amounts = np.asarray(record.amounts, dtype=np.float64).reshape(ledger.runs, -1)[run]
        for column in range(columns):
            totals[column][record.t] += Fraction(float(amounts[column if amounts.size > 1 else 0]))
    return totals


def _windows(totals: list[Fraction], w: int, epsilon: float) -> tuple[float, ...]:
    return tuple(float(sum(totals[max(1, end - w + 1) : end + 1]) / Fraction(epsilon)) for end in range(1, len(totals)))


def _curves(ledger: LedgerCore, case: AnyCase, run: int) -> list[_Curve]:
    """w-event: every window; personalized: every class's windows against its ε_i; Swellfish: every
    policy's TOP_δ(J) sum over J ∩ [1, t] against ε."""
    if isinstance(case, PersonalizedCase):
        classes = case.requirements.classes
        per_class = _totals(ledger, run, len(classes))
        return [_Curve(f"class w={r.w}, ε={r.epsilon:g}: window sum / ε", _windows(per_class[c], r.w, r.epsilon)) for c, r in enumerate(classes)]
    if isinstance(case, SwellfishCase):
        (totals,) = _totals(ledger, run, 1)
        curves = []
        for index, policy in enumerate(case.policies.policies):
            delta, end = case.policies.delta(index), min(policy.end, len(totals) - 1)
            ratios = tuple(float(sum(sorted(totals[policy.start : t + 1], reverse=True)[:delta]) / Fraction(case.epsilon))
                           for t in range(policy.start, end + 1))
            curves.append(_Curve(f"J=[{policy.start}, {policy.end}], δ={delta}: TOP_δ sum / ε", ratios, policy.start))
        return curves
    (totals,) = _totals(ledger, run, 1)
    return [_Curve(f"Σ ε over window [t−{case.w}+1, t] / ε", _windows(totals, case.w, case.epsilon))]


def _replay(result: VerifyResult, case: AnyCase) -> tuple[LedgerCore, BudgetExceeded | None, str]:
    """Run the mechanism on the case again: the ledger, its refusal if any, and a note if it stopped."""
    mechanism = load_mechanism(result.reference)
    ledger: LedgerCore
    stream: GuardedStream | PersonalizedStream
    if isinstance(case, PersonalizedCase):
        ledger = PersonalizedLedger(case.requirements, runs=case.runs, seed=case.seed, sampler="numpy-laplace", keep_records=True)
        stream = PersonalizedStream(case.requirements, case.bins, dimensions=case.dimensions)
    elif isinstance(case, SwellfishCase):
        ledger = SwellfishLedger(case.policies, epsilon=case.epsilon, runs=case.runs, seed=case.seed, sampler="numpy-laplace", keep_records=True)
        stream = GuardedStream(case.data)
    else:
        ledger = WindowLedger(WEventParams(case.epsilon, case.w), runs=case.runs, seed=case.seed, sampler="numpy-laplace", keep_records=True)
        stream = GuardedStream(case.data)
    ledger.bind(stream)
    try:
        mechanism.run(stream, ledger)
    except BudgetExceeded as exc:
        return ledger, exc, ""
    except SecretAccess as exc:  # the stage (b) failure; plot what was spent before it
        return ledger, None, f"; stopped at a secret access: {str(exc).split(':')[0]}"
    return ledger, None, ""


def _describe(case: AnyCase) -> str:
    if isinstance(case, PersonalizedCase):
        return f"{case.requirements.n_classes} classes, {case.requirements.n_users} users, T = {case.bins.shape[0]}"
    if isinstance(case, SwellfishCase):
        return f"{len(case.policies.policies)} policies, T = {case.data.shape[0]}"
    return f"w = {case.w}, {case.kind} stream, d = {case.data.shape[1]}"


def write_report(result: VerifyResult, case: AnyCase, path: Path) -> None:
    """Replay ``case`` and plot the budget use of its heaviest run against ε (per class or per
    relevance interval where the notion has them); PNG, or HTML around a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ledger, refusal, stopped = _replay(result, case)
    per_run = [_curves(ledger, case, r) for r in range(ledger.runs)]
    heaviest = [max((max(c.ratios, default=0.0) for c in curves), default=0.0) for curves in per_run]
    run = refusal.run if refusal is not None else int(np.argmax(heaviest))
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=110)
    for curve in per_run[run]:
        axes.step(range(curve.first, curve.first + len(curve.ratios)), curve.ratios, where="mid", label=f"{curve.label}, run {run}")
    axes.axhline(1.0, color="black", linestyle="--", label="the bound (ε, or the class's ε_i)")
    if refusal is not None:
        ratio = refusal.window_sum / refusal.epsilon
        axes.scatter([refusal.window[1]], [ratio], color="red", zorder=3, label="refused spend (violation)")
        axes.annotate(f"window {list(refusal.window)} would use {ratio:.4g} of ε", (refusal.window[1], ratio),
                      textcoords="offset points", xytext=(-8, 6), ha="right", color="red")
    axes.set_xlabel("timestamp t")
    axes.set_ylabel("budget used / ε")
    axes.set_title(f"budgetcheck verify {result.reference}: {result.verdict} ({_describe(case)}){stopped}", fontsize=10)
    top = max([1.0, *(max(c.ratios, default=0.0) for c in per_run[run])] + ([refusal.window_sum / refusal.epsilon] if refusal else []))
    axes.set_ylim(0, 1.2 * top)
    axes.legend(loc="lower right", fontsize=8)
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
