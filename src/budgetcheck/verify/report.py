"""``verify --report``: the budget use of the worst run found against ε (per requirement class or
per relevance interval where the notion has them), violations marked."""

from __future__ import annotations

import base64
import html
import io
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import numpy as np

from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import BudgetExceeded, SecretAccess
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.mechanism.loading import load_mechanism
from budgetcheck.strategies import PersonalizedCase, SwellfishCase, VerificationCase
from budgetcheck.stream.guarded import GuardedStream, PersonalizedStream
from budgetcheck.verify.explain import explain, verdict_name
from budgetcheck.verify.owner import ledger_flags
from budgetcheck.verify.stages import AnyCase, VerifyResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
        return [
            _Curve(
                f"users with w = {r.w}, ε = {r.epsilon:g}: spent in their last {r.w} timestamps / their ε",
                _windows(per_class[c], r.w, r.epsilon),
            )
            for c, r in enumerate(classes)
        ]
    if isinstance(case, SwellfishCase):
        (totals,) = _totals(ledger, run, 1)
        curves = []
        for index, policy in enumerate(case.policies.policies):
            delta, end = case.policies.delta(index), min(policy.end, len(totals) - 1)
            ratios = tuple(
                float(sum(sorted(totals[policy.start : t + 1], reverse=True)[:delta]) / Fraction(case.epsilon))
                for t in range(policy.start, end + 1)
            )
            largest = "largest spend" if delta == 1 else f"{delta} largest spends"
            label = f"pattern in timestamps {policy.start}–{policy.end}: its {largest} so far"
            curves.append(_Curve(label, ratios, policy.start))
        return curves
    (totals,) = _totals(ledger, run, 1)
    return [_Curve(f"privacy spent in the last w = {case.w} timestamps", _windows(totals, case.w, case.epsilon))]


def _replay(result: VerifyResult, case: AnyCase) -> tuple[LedgerCore, BudgetExceeded | None, str]:
    """Run the mechanism on the case again: the ledger, its refusal if any, and a note if it stopped."""
    mechanism = load_mechanism(result.reference)
    ledger: LedgerCore
    stream: GuardedStream | PersonalizedStream
    if isinstance(case, PersonalizedCase):
        ledger = PersonalizedLedger(
            case.requirements,
            runs=case.runs,
            seed=case.seed,
            sampler="numpy-laplace",
            keep_records=True,
            **ledger_flags(),
        )
        stream = PersonalizedStream(case.requirements, case.bins, dimensions=case.dimensions)
    elif isinstance(case, SwellfishCase):
        ledger = SwellfishLedger(
            case.policies,
            epsilon=case.epsilon,
            runs=case.runs,
            seed=case.seed,
            sampler="numpy-laplace",
            keep_records=True,
            **ledger_flags(),
        )
        stream = GuardedStream(case.data)
    else:
        ledger = WindowLedger(
            WEventParams(case.epsilon, case.w),
            runs=case.runs,
            seed=case.seed,
            sampler="numpy-laplace",
            keep_records=True,
            **ledger_flags(),
        )
        for t in case.intrusions:  # announced intrusions (Kellaris et al. 2014, §4.5): forced publications
            if t <= case.data.shape[0]:
                ledger.announce_intrusion(t)
        stream = GuardedStream(case.data)
    ledger.bind(stream)
    try:
        mechanism.run(stream, ledger)
    except BudgetExceeded as exc:
        return ledger, exc, ""
    except SecretAccess as exc:  # the stage (b) failure; plot what was spent before it
        return ledger, None, f"; stopped at a secret access: {str(exc).split(':')[0]}"
    return ledger, None, ""


SHOW_W = 10  # the w a report shows when the case found has a smaller one
SPAN = 4  # a report's run spans SPAN·w timestamps at least (>= 3w, so that windows slide)


def showcase(result: VerifyResult, case: AnyCase) -> AnyCase:
    """The run ``verify --report`` draws: for w-event, the case's stream repeated to at least 4w timestamps,
    with w raised to 10 where the case had less (a shrunk counterexample is often w = 1 or 2, T = 2), provided
    the picture keeps the verdict: a violated mechanism must still be refused. Other notions: the case."""
    if not isinstance(case, VerificationCase):
        return case
    candidates = [_stretched(case, w) for w in dict.fromkeys([max(case.w, SHOW_W), case.w])]
    if result.counterexample is None:
        return candidates[0]
    for candidate in candidates:
        if _replay(result, candidate)[1] is not None:
            return candidate
    return case


def _stretched(case: VerificationCase, w: int) -> VerificationCase:
    length = max(case.data.shape[0], SPAN * w)
    return attrs.evolve(case, data=np.resize(case.data, (length, case.data.shape[1])), w=w)


def _length(case: AnyCase) -> int:
    return int(case.bins.shape[0] if isinstance(case, PersonalizedCase) else case.data.shape[0])


def _describe(case: AnyCase, run: int) -> str:
    which = f"run {run + 1} of {case.runs}" if case.runs > 1 else "one run"
    if isinstance(case, PersonalizedCase):
        classes, users = case.requirements.n_classes, case.requirements.n_users
        return (
            f"{which}: {classes} {'class' if classes == 1 else 'classes'}, "
            f"{users} {'user' if users == 1 else 'users'}, T = {_length(case)} timestamps"
        )
    if isinstance(case, SwellfishCase):
        return f"{which}: {len(case.policies.policies)} patterns, ε = {case.epsilon:g}, T = {_length(case)} timestamps"
    return (
        f"{which}: ε = {case.epsilon:g}, w = {case.w}, T = {_length(case)} timestamps, {case.kind} stream, "
        f"{case.data.shape[1]} {'count' if case.data.shape[1] == 1 else 'counts'} per timestamp"
    )


def draw_report(result: VerifyResult, case: AnyCase) -> tuple[Figure, AnyCase]:
    """The figure of ``verify --report`` and the case it shows (see :func:`showcase`): privacy spent per
    window (per class, or per pattern) as a line against ε, the refused attempt marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    shown = showcase(result, case)
    ledger, refusal, stopped = _replay(result, shown)
    per_run = [_curves(ledger, shown, r) for r in range(ledger.runs)]
    heaviest = [max((max(c.ratios, default=0.0) for c in curves), default=0.0) for curves in per_run]
    run = refusal.run if refusal is not None else int(np.argmax(heaviest))
    shares = isinstance(shown, PersonalizedCase)  # classes have their own ε_i: plot shares of it
    scale = 1.0 if isinstance(shown, PersonalizedCase) else shown.epsilon
    length = _length(shown)
    figure = Figure(figsize=(9, 5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)  # drawn without pyplot: no global state, no display
    axes = figure.add_subplot()
    if isinstance(shown, VerificationCase):
        (totals,) = _totals(ledger, run, 1)
        spent = [float(x) for x in totals[1:]]
        axes.bar(range(1, len(spent) + 1), spent, width=0.6, color="#b8c7d9", label="privacy spent at t")
    for curve in per_run[run]:
        times = range(curve.first, curve.first + len(curve.ratios))
        axes.plot(times, [r * scale for r in curve.ratios], marker="o", markersize=3, linewidth=1.8, label=curve.label)
    bound = "each class's ε" if shares else f"ε = {scale:g}"
    limit = {
        VerificationCase: f": the most any {getattr(shown, 'w', 0)} consecutive timestamps may spend",
        SwellfishCase: ": the most a pattern's largest spends may sum to",
    }.get(type(shown), "")
    axes.axhline(scale, color="black", linestyle="--", linewidth=1.2, label=bound + limit)
    top = max([1.0, *(max(c.ratios, default=0.0) for c in per_run[run])])
    if refusal is not None:
        ratio = refusal.window_sum / refusal.epsilon
        top = max(top, ratio)
        at = refusal.window[1]
        axes.plot([at, at], [scale, ratio * scale], color="red", linestyle=":", linewidth=1.5)
        axes.plot(
            [at],
            [ratio * scale],
            marker="X",
            markersize=13,
            color="red",
            linestyle="none",
            label="refused by the ledger: the overspend the mechanism attempted",
        )
        axes.annotate(
            f"refused at t = {at}: timestamps {refusal.window[0]}–{at} would have spent "
            f"{ratio * scale:.4g} {'of their ε' if shares else f'> ε = {scale:g}'}",
            (at, ratio * scale),
            textcoords="offset points",
            xytext=(12, 8) if at < 0.6 * length else (-12, 8),
            ha="left" if at < 0.6 * length else "right",
            color="red",
            fontsize=9,
        )
        if at < length:
            axes.axvspan(
                at + 0.5, length + 0.5, color="red", alpha=0.06, label="not run: the mechanism stopped at the refusal"
            )
    axes.set_xlim(0.5, length + 0.5)
    axes.set_ylim(0, 1.3 * top * scale)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("timestamp t")
    axes.set_ylabel("privacy spent, as a share of ε" if shares else "privacy spent (ε)")
    figure.suptitle(f"budgetcheck verify {result.reference}: {verdict_name(result)}", fontsize=11)
    axes.set_title(_describe(shown, run) + stopped, fontsize=9)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    return figure, shown


def write_report(result: VerifyResult, case: AnyCase, path: Path) -> None:
    """Replay the run :func:`showcase` chooses and write :func:`draw_report`'s figure: PNG, or HTML around a PNG."""
    figure, _ = draw_report(result, case)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    if path.suffix.lower() == ".html":
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        path.write_text(report_html(result, encoded), encoding="utf-8")
    else:
        path.write_bytes(buffer.getvalue())


def report_html(result: VerifyResult, png_base64: str) -> str:
    """The HTML page of a report: the verdict as the CLI prints it (``VIOLATED``, ``proved``, ...), every
    stage, the paragraphs under the CLI's table (the ``reproduce:`` call among them), then the figure."""
    title = f"budgetcheck verify {result.reference}: {verdict_name(result)}"
    stages = "".join(
        f"<li><b>{html.escape(s.stage)}</b>: {html.escape(str(s.verdict))} — {html.escape(s.detail)}</li>"
        for s in result.stages
    )
    details = "".join(f"<pre>{html.escape(paragraph)}</pre>" for paragraph in explain(result))
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><ul>{stages}</ul>{details}"
        f"<img alt='the privacy spent per timestamp' src='data:image/png;base64,{png_base64}'></body></html>"
    )
