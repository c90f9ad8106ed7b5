"""Attacks from outside on the newest charged operations, written from their public docs only.

- ``PersonalizedLedger.local_report`` / ``local_report_groups``: the oracles' likelihood ratio in both
  directions at every ε (tiny and huge included), clean refusals that change nothing, records and
  refusals that do not depend on the data, every user window audited in exact rationals, the realised
  report frequencies against the documented p and q, an unbiased estimate at d >= 2.
- ``WindowLedger.held_laplace`` / ``announce_intrusion`` (Kellaris et al. 2014, §4.5): every window
  against every single unannounced intrusion time, forced publications charged, refusals that change
  nothing (a twin ledger's next draw), spending ``remaining`` accepted and one ulp more refused.
- ``laplace_weighted`` over ``TreeSums``: the realised loss of every neighbouring pair (brute force, every
  relation the docs list) against ε; ``Hierarchy`` against an independent tree validator.
- The one-run ledger's exact integers against a two-run ledger and a Fraction oracle at w up to 10^6.
"""

from __future__ import annotations

import itertools
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    Hierarchy,
    InvalidArgument,
    Neighbours,
    PersonalizedLedger,
    PersonalizedStream,
    RequirementSet,
    TreeSums,
    WindowLedger,
)
from budgetcheck.ledger.local import probabilities, realisable, uses_grr

EXPOSURE = "intrusion exposure"


def _personalized(classes, bins, d, runs=1, seed=0):
    requirements = RequirementSet.from_counts(classes)
    stream = PersonalizedStream(requirements, np.asarray(bins, dtype=np.int64), dimensions=d)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=seed, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    return stream, ledger


def _below_exp(ratio: Fraction, eps: float) -> bool:
    """ratio <= e^eps, decided at 120 significant digits (exp is correctly rounded by decimal)."""
    if eps > 1500.0:  # e^1500 > 2^2163, above any ratio of two doubles
        return ratio < Fraction(2) ** 2163
    with localcontext() as ctx:
        ctx.prec = 120
        return Decimal(ratio.numerator) / Decimal(ratio.denominator) <= Decimal(eps).exp()


# ---------------------------------------------------------------- local reports: the oracle itself


@settings(max_examples=300, deadline=None)
@given(
    eps=st.one_of(
        st.floats(5e-324, 1e-12),
        st.floats(1e-12, 50.0),
        st.floats(50.0, 1e5),
        st.sampled_from([5e-324, 2e-16, 3.5e-15, 709.78, 709.79, 1.7e308]),
    ),
    d=st.integers(1, 300),
)
def test_the_oracle_is_eps_ldp_in_both_directions_for_every_pair_of_inputs(eps: float, d: int) -> None:
    """Every output's probability under one input is at most e^ε times its probability under another,
    including ⊥ (absent), in both directions: GRR p/q and q/p; OUE's changed bits (1−q)/q, q/(1−q),
    and present vs absent (1/2)/q, q/(1/2), (1/2)/(1−q), (1−q)/(1/2). Exact rationals of the floats used."""
    p, q = (Fraction(float(x.item())) for x in probabilities(np.array([[eps]]), d))
    assert 0 < q and 0 < p <= 1
    assert (p > q) is bool(realisable(np.array(eps)))  # p = q: a report independent of the value
    if bool(uses_grr(np.array(eps), d)):
        ratios = [p / q, q / p]
    else:
        half = Fraction(1, 2)
        ratios = [(1 - q) / q, q / (1 - q), half / q, q / half, half / (1 - q), (1 - q) / half]
    for ratio in ratios:
        assert _below_exp(ratio, eps), (eps, d, float(ratio))


@pytest.mark.parametrize("eps", [709.0, 710.0, 1e5, 1e300])
def test_a_huge_budget_reports_or_is_refused_cleanly(eps: float) -> None:
    """A class whose ε_i allows a huge ε_{i,t}: either a finite estimate, charged, or an InvalidArgument
    naming the value and nothing charged — never a numpy error after the charge."""
    stream, ledger = _personalized([((2, 1e308), 3)], [[1, 0, -1]], 3, runs=4)
    try:
        out = ledger.local_report(stream.secret(1), [eps])
    except InvalidArgument as error:
        assert "epsilon" in str(error)
        assert len(ledger.records) == 0 and ledger.remaining(1).tolist() == [[1e308]] * 4
        return
    assert np.isfinite(out).all() and out.shape == (4, 3)
    (record,) = ledger.records
    assert record.amounts.tolist() == [[eps]] * 4


def _neighbour_pair(data, n, d):
    bins = data.draw(st.lists(st.lists(st.integers(-1, d - 1), min_size=n, max_size=n), min_size=4, max_size=4))
    user = data.draw(st.integers(0, n - 1))
    t = data.draw(st.integers(0, 3))
    other = [row[:] for row in bins]
    other[t][user] = data.draw(st.integers(-1, d - 1))
    return bins, other


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_records_remaining_and_refusals_never_depend_on_a_users_value(data: st.DataObject) -> None:
    """Two streams that differ in one user at one timestamp, the same call sequence (grouped and ungrouped,
    the same timestamp twice, refusals included): the records, remaining() and every error message agree."""
    d = data.draw(st.integers(1, 4))
    classes = [((2, 1.0), 2), ((3, 0.5), 1)]  # a class with one user
    bins, other = _neighbour_pair(data, 3, d)
    calls = data.draw(
        st.lists(
            st.tuples(st.integers(1, 4), st.sampled_from([0.0, 0.25, 0.5, 0.6, 1.0]), st.booleans()),
            min_size=1,
            max_size=8,
        )
    )
    calls.sort(key=lambda c: c[0])
    transcripts = []
    for rows in (bins, other):
        stream, ledger = _personalized(classes, rows, d, runs=2, seed=11)
        transcript: list[object] = []
        for t, eps, grouped in calls:
            try:
                if grouped:
                    ledger.local_report_groups(stream.secret(t), np.full((2, 2, 1), eps), groups=1)
                else:
                    ledger.local_report(stream.secret(t), [eps, eps / 2])
                transcript.append("ok")
            except (BudgetExceeded, InvalidArgument) as error:
                transcript.append((type(error).__name__, str(error)))
            transcript.append(ledger.remaining(t).tolist())
        transcript.append([(r.t, r.purpose, np.asarray(r.amounts).tolist(), r.sampler) for r in ledger.records])
        transcripts.append(transcript)
    assert transcripts[0] == transcripts[1]


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_user_window_of_every_group_is_within_its_epsilon_audited_in_fractions(data: st.DataObject) -> None:
    """Adversarial sequences (remaining, one ulp over it, the same timestamp twice, grouped and not):
    each accept/refuse agrees with an exact oracle, and the records' per-(class, group) windows are <= ε_c."""
    ws = sorted(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True)))
    epses = [data.draw(st.sampled_from([0.3, 1.0, 0.1 + 0.2])) for _ in ws]
    classes = [((w, e), 2) for w, e in zip(ws, epses, strict=True)]
    classes = sorted(classes)
    k = len(classes)
    groups = data.draw(st.integers(1, 2))
    stream, ledger = _personalized(classes, np.zeros((12, 2 * k), dtype=np.int64), 2)
    spent: dict[tuple[int, int, int], Fraction] = {}  # (t, class, group) -> exact spend
    t = 1
    for _ in range(data.draw(st.integers(1, 10))):
        t = min(12, t + data.draw(st.integers(0, 2)))
        left = ledger.remaining_groups(t)[0]
        kind = data.draw(st.sampled_from(["left", "over", "half", "sub"]))
        amounts = np.zeros((1, k, groups))
        for c in range(k):
            for g in range(groups):
                base = float(left[c, min(g, left.shape[1] - 1)])  # one group until the first grouped report
                amounts[0, c, g] = {
                    "left": base,
                    "over": float(np.nextafter(base, np.inf)),
                    "half": base / 2,
                    "sub": 5e-324,
                }[data.draw(st.sampled_from([kind, "half"]))]
        over = False
        for c, ((w, eps), _) in enumerate(classes):
            for g in range(groups):
                total = sum((v for (s, cc, gg), v in spent.items() if cc == c and gg == g and s > t - w), Fraction(0))
                over |= total + Fraction(amounts[0, c, g]) > Fraction(eps)
        if not amounts.any():
            continue
        if over:
            with pytest.raises(BudgetExceeded):
                ledger.local_report_groups(stream.secret(t), amounts, groups=groups)
            continue
        ledger.local_report_groups(stream.secret(t), amounts, groups=groups)
        for c in range(k):
            for g in range(groups):
                spent[(t, c, g)] = spent.get((t, c, g), Fraction(0)) + Fraction(amounts[0, c, g])
    # audit from the records alone
    per: dict[tuple[int, int, int], Fraction] = {}
    for record in ledger.records:
        a = np.asarray(record.amounts).reshape(1, k, -1)
        for c, g in itertools.product(range(k), range(a.shape[2])):
            per[(record.t, c, g)] = per.get((record.t, c, g), Fraction(0)) + Fraction(float(a[0, c, g]))
    assert per == {key: v for key, v in spent.items() if key in per or v}
    for (t0, c, g), _ in per.items():
        w, eps = classes[c][0]
        for end in range(t0, t0 + w):
            window = sum(
                (v for (s, cc, gg), v in per.items() if cc == c and gg == g and end - w < s <= end), Fraction(0)
            )
            assert window <= Fraction(eps)


@pytest.mark.parametrize("tiny", [5e-324, 1e-16, 3e-15])
def test_a_budget_too_small_for_any_oracle_is_charged_and_says_nothing_about_the_value(tiny: float) -> None:
    """Below about 2^-48 no doubles p > q are within e^ε: the report must not depend on the value. Two
    streams (everyone in bin 0 / everyone absent), the same seed: the same output, finite, bit for bit,
    and the same charge; a class reporting beside it still gets its unbiased estimate."""
    outputs = []
    for row in ([0, 0, 0, 1], [-1, -1, -1, 1]):
        stream, ledger = _personalized([((2, 1.0), 3), ((3, 8.0), 1)], [row], 2, runs=500, seed=9)
        outputs.append(ledger.local_report(stream.secret(1), [tiny, 0.0]))
        left = ledger.remaining(1)[0]
        assert Fraction(1) - Fraction(tiny) - Fraction(2.0**-52) <= Fraction(left[0]) <= Fraction(1) - Fraction(tiny)
        assert left[1] == 8.0
    assert np.array_equal(outputs[0], outputs[1]) and np.isfinite(outputs[0]).all()
    stream, ledger = _personalized([((2, 1.0), 3), ((3, 8.0), 1)], [[0, 0, 0, 1]], 2, runs=2000, seed=9)
    mixed = ledger.local_report(stream.secret(1), [tiny, 8.0])
    assert abs(mixed[:, 1].mean() - 1.0) < 0.01 and abs(mixed[:, 0].mean()) < 0.01  # e^8: nearly exact


def _support_counts(estimate: np.ndarray, eps: float, d: int, n: int) -> np.ndarray:
    """Invert the documented estimator n̂ = (S − n q)/(p − q) back to the support counts S (integers)."""
    p, q = (float(x.item()) for x in probabilities(np.array([[eps]]), d))
    support = estimate * (p - q) + n * q
    rounded = np.rint(support)
    assert np.allclose(support, rounded, atol=1e-6)
    return rounded


@pytest.mark.parametrize(("eps", "d"), [(1.0, 2), (0.7, 12)])  # GRR, then OUE
def test_the_realised_report_frequencies_match_p_and_q_and_stay_within_e_eps(eps: float, d: int) -> None:
    """One user (a class of one) in bin 0, R = 40,000 runs: the share of runs whose report supports bin 0
    is p, bin 1 is q (two-sided binomial tests at 1e-6 each), and the Clopper-Pearson 1 − 1e-6 lower
    bound of the realised ratio P[0]/P[1] is at most e^ε. False-failure rate below 4e-6 in all."""
    runs = 40_000
    p, q = (float(x.item()) for x in probabilities(np.array([[eps]]), d))
    stream, ledger = _personalized([((1, eps), 1)], [[0]], d, runs=runs, seed=2024)
    support = _support_counts(ledger.local_report(stream.secret(1), [eps]), eps, d, 1)
    assert set(np.unique(support)) <= {0.0, 1.0}
    hits_true, hits_other = int(support[:, 0].sum()), int(support[:, 1].sum())
    assert stats.binomtest(hits_true, runs, p).pvalue > 1e-6
    assert stats.binomtest(hits_other, runs, q).pvalue > 1e-6
    low_true = stats.binomtest(hits_true, runs).proportion_ci(1 - 1e-6).low
    high_other = stats.binomtest(hits_other, runs).proportion_ci(1 - 1e-6).high
    assert low_true / high_other <= np.exp(eps)


@pytest.mark.parametrize(("eps", "d"), [(1.5, 2), (0.4, 6), (0.9, 40)])
def test_the_estimate_is_unbiased_at_d_of_two_and_more(eps: float, d: int) -> None:
    """60 users over the bins and ⊥ in two classes, R = 3000 runs: every bin's mean within 5.5 standard
    errors of the truth, with the exact per-bin variance of the documented p, q (false failure < d·4e-8)."""
    runs = 3000
    rng = np.random.default_rng(d)
    bins = rng.integers(-1, d, size=(1, 60))
    bins[0, :25] = d - 1
    stream, ledger = _personalized([((3, 2.0), 40), ((4, 3.0), 20)], bins, d, runs=runs, seed=5)
    estimate = ledger.local_report(stream.secret(1), [eps, 2 * eps])
    variance = np.zeros(d)
    truth = np.zeros(d)
    for c, (lo, hi, e) in enumerate([(0, 40, eps), (40, 60, 2 * eps)]):
        p, q = (float(x.item()) for x in probabilities(np.array([[e]]), d))
        n_j = np.array([(bins[0, lo:hi] == j).sum() for j in range(d)], dtype=float)
        truth += n_j
        variance += (n_j * p * (1 - p) + (hi - lo - n_j) * q * (1 - q)) / (p - q) ** 2
        assert c in (0, 1)
    z = (estimate.mean(axis=0) - truth) / np.sqrt(variance / runs)
    assert np.abs(z).max() < 5.5, z


def test_a_zero_or_bad_budget_reads_nothing_and_charges_nothing() -> None:
    """0, NaN, negative, inf: refused by name before any charge or read; a run with 0 beside a reporting
    run gets NaN and pays nothing."""
    stream, ledger = _personalized([((2, 1.0), 1)], [[0], [1]], 2, runs=2)
    for bad in ([0.0], [float("nan")], [-1e-300], [float("inf")]):
        with pytest.raises(InvalidArgument, match="epsilon"):
            ledger.local_report(stream.secret(1), bad)
        with pytest.raises(InvalidArgument, match="epsilon"):
            ledger.local_report_groups(stream.secret(1), np.full((2, 1, 1), bad[0]), groups=1)
    assert len(ledger.records) == 0 and ledger.remaining(1).tolist() == [[1.0], [1.0]]
    # a run with 0 sends nothing: NaN there, charged nothing there
    out = ledger.local_report(stream.secret(1), [[0.0], [0.5]])
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    assert ledger.remaining(1).tolist() == [[1.0], [0.5]]
    # the same timestamp again is charged again: 0.5 + 0.5 fills the window, one ulp more is refused
    ledger.local_report(stream.secret(1), [[0.0], [0.5]])
    with pytest.raises(BudgetExceeded):
        ledger.local_report(stream.secret(1), [[0.0], [5e-324]])


# ---------------------------------------------------------------- pan-private held releases


def _pan_ledgers(w, eps, runs=2, seed=4):
    stream = GuardedStream(np.arange(1.0, 13.0)[:, None])
    twin_stream = GuardedStream(np.arange(1.0, 13.0)[:, None])
    make = lambda: WindowLedger(epsilon=eps, w=w, runs=runs, seed=seed, sampler="numpy-laplace", keep_records=True)  # noqa: E731
    return stream, make(), twin_stream, make()


def _pan_audit(records, runs, w, eps):
    """Every window, every single intrusion time τ in it: Σ spends + the exposure at τ <= ε (exact)."""
    spend: dict[tuple[int, int], Fraction] = {}
    exposed: dict[tuple[int, int], Fraction] = {}
    for record in records:
        target = exposed if record.purpose == EXPOSURE else spend
        for r, a in enumerate(np.asarray(record.amounts, dtype=float).reshape(runs)):
            target[(r, record.t)] = target.get((r, record.t), Fraction(0)) + Fraction(float(a))
    last = max([t for _, t in spend] + [t for _, t in exposed] + [1])
    for r, end in itertools.product(range(runs), range(1, last + w)):
        times = range(end - w + 1, end + 1)
        base = sum((spend.get((r, s), Fraction(0)) for s in times), Fraction(0))
        worst = max(exposed.get((r, s), Fraction(0)) for s in times)
        assert base + worst <= Fraction(eps), (r, end, float(base), float(worst))
    return spend, exposed


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_window_holds_under_every_single_unannounced_intrusion(data: st.DataObject) -> None:
    """Held releases and plain spends at adversarial amounts (remaining, one ulp over, halves, subnormals, two
    holds at one t): each decision matches an exact oracle (a hold checked as if published), every window and
    intrusion time of the records is within ε, and a refusal leaves remaining(), the records and the next
    draw exactly as on a twin ledger that never tried it."""
    w = data.draw(st.integers(1, 4))
    eps = data.draw(st.sampled_from([1.0, 0.3, 0.1 + 0.2]))
    stream, ledger, twin_stream, twin = _pan_ledgers(w, eps)
    spend: dict[tuple[int, int], Fraction] = {}
    exposed: dict[tuple[int, int], Fraction] = {}
    t = 1
    for _ in range(data.draw(st.integers(1, 10))):
        t = min(12, t + data.draw(st.integers(0, 1)))
        left = ledger.remaining(t)
        amounts = np.array(
            [
                {"left": x, "over": np.nextafter(x, np.inf), "half": x / 2, "zero": 0.0, "sub": 5e-324}[
                    data.draw(st.sampled_from(["left", "over", "half", "zero", "sub"]))
                ]
                for x in left
            ]
        )
        held = data.draw(st.booleans())
        publish = np.array(data.draw(st.lists(st.booleans(), min_size=2, max_size=2)))
        over = False
        for r in range(2):
            times = range(t - w + 1, t + 1)
            base = sum((spend.get((r, s), Fraction(0)) for s in times), Fraction(0)) + Fraction(amounts[r])
            worst = max(exposed.get((r, s), Fraction(0)) for s in times)
            over |= base + worst > Fraction(eps)
        call = (
            (lambda lg, st_: lg.held_laplace(st_.secret(t), amounts, publish))
            if held
            else (lambda lg, st_: lg.spend(t, amounts, purpose="x"))
        )
        if over:
            with pytest.raises(BudgetExceeded):
                call(ledger, stream)
        else:
            out, twin_out = call(ledger, stream), call(twin, twin_stream)
            if held:
                assert np.array_equal(out, twin_out, equal_nan=True)
                shown = publish & (amounts > 0)
                assert not np.isnan(out[shown]).any() and np.isnan(out[~shown]).all()  # ε = 5e-324: scale inf
            for r in range(2):
                a = Fraction(amounts[r])
                target = exposed if held and not publish[r] else spend
                target[(r, t)] = target.get((r, t), Fraction(0)) + a
        assert ledger.remaining(t).tolist() == twin.remaining(t).tolist()
        assert [repr(x) for x in ledger.records] == [repr(x) for x in twin.records]
    got_spend, got_exposed = _pan_audit(ledger.records, 2, w, eps)
    assert {k: v for k, v in got_spend.items() if v} == {k: v for k, v in spend.items() if v}
    assert {k: v for k, v in got_exposed.items() if v} == {k: v for k, v in exposed.items() if v}


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_an_announced_intrusion_always_forces_a_charged_publication(data: st.DataObject) -> None:
    """At an announced t every run with ε > 0 is published and charged whatever ``publish`` says, a forced
    publication over the window is refused, a discarded held value costs nothing, no exposure is recorded."""
    w = data.draw(st.integers(1, 4))
    stream, ledger, _, _ = _pan_ledgers(w, 1.0)
    spent: dict[tuple[int, int], Fraction] = {}
    for t in range(1, data.draw(st.integers(2, 10))):
        if data.draw(st.booleans()):
            ledger.announce_intrusion(t)
        forced = ledger.intrusion_announced(t)
        left = ledger.remaining(t)
        amounts = np.array([data.draw(st.sampled_from([x, x / 2, float(np.nextafter(x, np.inf)), 0.0])) for x in left])
        publish = np.array(data.draw(st.lists(st.booleans(), min_size=2, max_size=2)))
        shown = (publish | forced) & (amounts > 0)
        over = any(
            sum((spent.get((r, s), Fraction(0)) for s in range(t - w + 1, t)), Fraction(0)) + Fraction(amounts[r]) > 1
            for r in range(2)
            if shown[r]
        )
        if over:
            with pytest.raises(BudgetExceeded):
                ledger.held_laplace(stream.secret(t), amounts, publish, intrusions="announced")
            continue
        out = ledger.held_laplace(stream.secret(t), amounts, publish, intrusions="announced")
        assert np.isfinite(out[shown]).all() and np.isnan(out[~shown]).all()
        for r in np.flatnonzero(shown):
            spent[(int(r), t)] = Fraction(amounts[r])
    charged: dict[tuple[int, int], Fraction] = {}
    for record in ledger.records:
        assert record.purpose != EXPOSURE
        for r, a in enumerate(np.asarray(record.amounts, dtype=float)):
            if a:
                charged[(r, record.t)] = charged.get((r, record.t), Fraction(0)) + Fraction(float(a))
    assert charged == spent
    _pan_audit(ledger.records, 2, w, 1.0)


def test_spending_remaining_under_an_exposure_is_accepted_and_one_ulp_more_refused() -> None:
    stream, ledger, twin_stream, twin = _pan_ledgers(3, 1.0, runs=1)
    for lg, s in ((ledger, stream), (twin, twin_stream)):
        lg.held_laplace(s.secret(1), 0.1 + 0.2, [False])  # exposure 0.30000000000000004
        lg.held_laplace(s.secret(2), 0.25, [True])
    left = ledger.remaining(3)
    assert Fraction(left[0]) <= 1 - Fraction(0.25) - Fraction(0.1 + 0.2)
    with pytest.raises(BudgetExceeded):
        ledger.held_laplace(stream.secret(3), np.nextafter(left, np.inf), [True])
    assert np.array_equal(
        ledger.held_laplace(stream.secret(3), left, [True]), twin.held_laplace(twin_stream.secret(3), left, [True])
    )
    _pan_audit(ledger.records, 1, 3, 1.0)


# ---------------------------------------------------------------- weighted tree releases and hierarchies


@st.composite
def _trees(draw):
    """A random valid tree: leaves merged in random groups of >= 2, level by level, up to one root."""
    leaves = draw(st.integers(2, 6))
    level, children, nxt = list(range(leaves)), [], leaves
    while len(level) > 1:
        level = draw(st.permutations(level))
        size = draw(st.integers(2, len(level)))
        children.append(list(level[:size]))
        level = [*level[size:], nxt]
        nxt += 1
    return leaves, children


def _deltas(relation: str, k: int, d: int):
    if relation == "replace":
        return [np.eye(d)[i] - np.eye(d)[j] for i in range(d) for j in range(d) if i != j]
    if relation == "one_bin":
        return [c * np.eye(d)[j] for j in range(d) for c in range(-k, k + 1) if c]
    out = []
    for v in itertools.product(range(-k, k + 1), repeat=d):
        if 0 < sum(map(abs, v)) <= k:
            out.append(np.array(v, dtype=float))
    return out


@settings(max_examples=40, deadline=None)
@given(tree=_trees(), data=st.data())
def test_the_weighted_tree_release_never_loses_more_than_eps_on_any_neighbouring_pair(tree, data) -> None:
    """Every neighbouring Δ of the stream's relation (one person, one leaf => every ancestor): the realised loss
    Σ_i |(AΔ)_i| / scale_i of the recorded noise scales is <= ε in exact rationals, per run."""
    leaves, children = tree
    hierarchy = Hierarchy(leaves, children)
    query = TreeSums(hierarchy)
    relation = data.draw(st.sampled_from(["one_bin", "across", "replace"]))
    k = data.draw(st.integers(1, 2)) if relation != "replace" else 1
    neighbours = {
        "one_bin": lambda: Neighbours.one_bin(k),
        "across": lambda: Neighbours.across_bins(k),
        "replace": Neighbours.replace_one,
    }[relation]()
    m = hierarchy.nodes
    weights = np.array(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=m, max_size=m), min_size=2, max_size=2)))
    assume(weights.sum(axis=1).all())
    eps = np.array([data.draw(st.sampled_from([1.0, 0.1 + 0.2, 3.0])) for _ in range(2)])
    stream = GuardedStream(np.ones((1, leaves)), neighbours=neighbours)
    ledger = WindowLedger(epsilon=3.0, w=2, runs=2, sampler="numpy-laplace", keep_records=True)
    out = ledger.laplace_weighted(stream.secret(1), query, weights, eps)
    scale = np.asarray(ledger.records[-1].noise_scale, dtype=float).reshape(2, m)
    assert np.array_equal(np.isinf(scale), weights == 0) and np.isnan(out[weights == 0]).all()
    a = hierarchy.matrix()
    for delta in _deltas(relation, k, leaves):
        change = np.abs(a @ delta)
        for r in range(2):
            loss = sum(
                (
                    Fraction(float(c)) / Fraction(float(s))
                    for c, s in zip(change, scale[r], strict=True)
                    if c and np.isfinite(s)
                ),
                Fraction(0),
            )
            assert loss <= Fraction(float(eps[r])), (relation, k, delta, r, float(loss))


@settings(max_examples=200, deadline=None)
@given(leaves=st.integers(1, 5), children=st.lists(st.lists(st.integers(-1, 9), max_size=4), max_size=5))
def test_a_hierarchy_is_accepted_exactly_when_it_is_a_tree(leaves: int, children: list[list[int]]) -> None:
    """An independent validator: indices in range, no repeats, every inner node >= 2 children, one parent
    each, acyclic, one root. Anything else is an InvalidArgument, never another exception."""
    nodes = leaves + len(children)
    parent: dict[int, int] = {}
    valid = True
    for i, kids in enumerate(children):
        valid &= len(kids) >= 2 and len(set(kids)) == len(kids) and all(0 <= c < nodes for c in kids)
        for c in kids:
            valid &= c not in parent and c != leaves + i
            parent[c] = leaves + i
    roots = [v for v in range(nodes) if v not in parent]
    valid &= len(roots) == 1
    if valid:  # acyclic: every node reaches the root
        for v in range(nodes):
            seen = set()
            while v in parent and v not in seen:
                seen.add(v)
                v = parent[v]
            valid &= v == roots[0]
    try:
        hierarchy = Hierarchy(leaves, children)
    except InvalidArgument:
        assert not valid
        return
    assert valid
    assert hierarchy.matrix()[hierarchy.root].tolist() == [1.0] * leaves


# ---------------------------------------------------------------- the one-run ledger's exact integers


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_one_run_ledger_decides_exactly_as_two_runs_and_a_fraction_oracle(data: st.DataObject) -> None:
    """w up to 10^6, gaps around w, amounts one ulp either side of what is left, subnormals: runs=1 and runs=2
    (the same spend on both runs) accept and refuse the same, report the same remaining(), as the exact oracle."""
    w = data.draw(st.sampled_from([1, 2, 3, 7, 1000, 10**6]))
    eps = data.draw(st.sampled_from([1.0, 0.1 + 0.2, 5e-324, 1e-300, 1e300]))
    one = WindowLedger(epsilon=eps, w=w, runs=1)
    two = WindowLedger(epsilon=eps, w=w, runs=2)
    history: list[tuple[int, Fraction]] = []
    t = 1
    for _ in range(data.draw(st.integers(1, 25))):
        t += data.draw(st.sampled_from([0, 1, w - 1, w, w + 1, 2**40]))
        t = min(t, 2**62)
        exact_left = Fraction(eps) - sum((a for s, a in history if s > t - w), Fraction(0))
        left = one.remaining(t)
        assert left.tolist() == [two.remaining(t)[0]] * 1 == [two.remaining(t)[1]]
        assert 0 <= Fraction(float(left[0])) <= exact_left
        near = float(left[0])
        amount = data.draw(
            st.sampled_from(
                [near, float(np.nextafter(near, np.inf)), float(np.nextafter(near, 0)), 5e-324, eps, near / 3]
            )
        )
        over = Fraction(amount) > exact_left
        for ledger in (one, two):
            if over:
                with pytest.raises(BudgetExceeded):
                    ledger.spend(t, amount, purpose="x")
            else:
                ledger.spend(t, amount, purpose="x")
        if not over:
            history.append((t, Fraction(amount)))
