"""``PersonalizedLedger.local_report``: ε-LDP frequency oracles charged in each user's own window.

Attacks: one ulp over a user's window, per-user windows of different lengths, the estimator's bias
and variance at 10^4 users, the oracles' realised likelihood ratio, and a mechanism trying to read a
user's value or report by the obvious routes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck import BudgetExceeded, InvalidArgument, PersonalizedLedger, PersonalizedStream, RequirementSet
from budgetcheck.ledger.local import exp_down, probabilities, uses_grr
from budgetcheck.stream.secret import reveal


def _setup(classes, bins, d, runs=1, seed=0):
    requirements = RequirementSet.from_counts(classes)
    stream = PersonalizedStream(requirements, bins, dimensions=d)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=seed, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    return stream, ledger


def test_one_ulp_over_a_users_window_is_refused_and_changes_nothing() -> None:
    """After 0.3 at t = 1, remaining(2) is spendable and one ulp more is refused: no record, no draw."""
    bins = np.zeros((4, 6), dtype=np.int64)
    stream, ledger = _setup([((3, 1.0), 3), ((2, 0.7), 3)], bins, 2, seed=5)
    twin_stream, twin = _setup([((3, 1.0), 3), ((2, 0.7), 3)], bins, 2, seed=5)
    ledger.local_report(stream.secret(1), [0.3, 0.3])
    twin.local_report(twin_stream.secret(1), [0.3, 0.3])
    left = ledger.remaining(2)[0]
    assert left[1] == 0.7 and Fraction(left[0]) <= Fraction(0.7) - Fraction(0.3)  # classes sorted by (w, ε)
    over = left.copy()
    over[0] = np.nextafter(left[0], np.inf)
    records = len(ledger.records)
    with pytest.raises(BudgetExceeded, match=r"w=2, epsilon=0.7"):
        ledger.local_report(stream.secret(2), over)
    assert len(ledger.records) == records
    assert ledger.remaining(2)[0].tolist() == left.tolist()
    # the refused call drew nothing: the next report equals the twin's, which never tried
    assert np.array_equal(ledger.local_report(stream.secret(2), left), twin.local_report(twin_stream.secret(2), left))
    assert ((ledger.remaining(2)[0] >= 0) & (ledger.remaining(2)[0] < 1e-15)).all()  # spent to the last ulp


@settings(max_examples=30, deadline=None)
@given(
    w=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    spends=st.lists(
        st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), min_size=3, max_size=3), min_size=1, max_size=14
    ),
)
def test_per_user_windows_of_different_lengths_are_each_exact(w: list[int], spends: list[list[float]]) -> None:
    """Every accepted charge keeps each class's own window within its ε; every refusal was a real overspend
    (checked by brute force in exact rationals, independently of the ledger)."""
    classes = [((wc, 1.0), 2) for wc in sorted(set(w))]  # the ledger's class order
    k = len(classes)
    stream, ledger = _setup(classes, np.zeros((len(spends), 2 * k), dtype=np.int64), 2)
    history: list[list[Fraction]] = []
    for t, row in enumerate(spends, start=1):
        amounts = row[:k]
        proposed = [*history, [Fraction(a) for a in amounts]]
        over = any(sum(h[c] for h in proposed[max(0, t - wc) :]) > 1 for c, ((wc, _), _) in enumerate(classes))
        if not any(amounts):
            history.append([Fraction(0)] * k)
            continue
        if over:
            with pytest.raises(BudgetExceeded):
                ledger.local_report(stream.secret(t), amounts)
            history.append([Fraction(0)] * k)
        else:
            ledger.local_report(stream.secret(t), amounts)
            history.append([Fraction(a) for a in amounts])


def _exact_variance(n_j: np.ndarray, n: int, eps: float, d: int) -> np.ndarray:
    p, q = (float(x.item()) for x in probabilities(np.array([[eps]]), d))
    return (n_j * p * (1 - p) + (n - n_j) * q * (1 - q)) / (p - q) ** 2


@pytest.mark.parametrize(("eps", "d"), [(2.0, 3), (0.2, 12)])  # GRR (d + 1 - 2 < 3e^ε), then OUE
def test_estimate_is_unbiased_with_ten_thousand_users(eps: float, d: int) -> None:
    """Mean over R = 4000 runs within 4.5 standard errors in every bin, sample variance within 12 %
    of the exact one. For a seed drawn at random the union bound puts the false-failure rate below
    2·12·3.4e-6 + 12·1e-6 < 1e-4 (normal tails; the variance check is > 7 standard deviations wide)."""
    rng = np.random.default_rng(7)
    users = 10_000
    bins = rng.integers(-1, d, size=(1, users))  # -1: absent users still report (⊥)
    bins[0, :3000] = 0  # a heavy bin
    stream, ledger = _setup([((5, eps), 6000), ((9, 2 * eps), 4000)], bins, d, runs=4000, seed=3)
    assert bool(uses_grr(np.array(eps), d)) is (eps == 2.0)
    estimate = ledger.local_report(stream.secret(1), [eps, 0.0])  # only class 0 (users 0..5999) reports
    truth = np.array([(bins[0, :6000] == j).sum() for j in range(d)], dtype=float)
    variance = _exact_variance(truth, 6000, eps, d)
    z = (estimate.mean(axis=0) - truth) / np.sqrt(variance / estimate.shape[0])
    assert np.abs(z).max() < 4.5, z
    ratio = estimate.var(axis=0, ddof=1) / variance
    assert np.all(np.abs(ratio - 1) < 0.12), ratio
    # the public variance the mechanisms test against is the bin average of the exact one (Σ n_j = n over D)
    assert ledger.local_variance([eps, 0.0], d)[0] > 0


@settings(max_examples=200, deadline=None)
@given(eps=st.floats(1e-6, 30.0), d=st.integers(1, 2000))
def test_the_realised_likelihood_ratio_never_exceeds_e_to_the_epsilon(eps: float, d: int) -> None:
    """GRR: p/q; OUE: (1/2)/q · (1 − q)/(1/2); both in exact rationals below e^ε (float exp is within 1 ulp)."""
    p, q = (Fraction(x.item()) for x in probabilities(np.array([[eps]]), d))
    ratio = p / q if uses_grr(np.array(eps), d) else (1 - q) / q
    assert ratio <= Fraction(math.exp(eps)) * (1 - Fraction(1, 2**50))
    assert float(exp_down(np.array(eps))) < math.exp(eps)


def test_users_of_a_class_that_does_not_report_are_charged_nothing_and_not_counted() -> None:
    bins = np.array([[0] * 50 + [1] * 50])
    stream, ledger = _setup([((3, 1.0), 50), ((4, 8.0), 50)], bins, 2, runs=200, seed=1)
    # class (3, 1.0) holds users 0..49 (all in bin 0) and stays silent; (4, 8.0) holds 50..99 in bin 1
    estimate = ledger.local_report(stream.secret(1), [0.0, 8.0])
    assert ledger.remaining(1)[0].tolist() == [1.0, 0.0]
    assert abs(estimate[:, 0].mean()) < 2.0 and abs(estimate[:, 1].mean() - 50) < 2.0
    (record,) = ledger.records
    assert record.amounts.tolist() == [[0.0, 8.0]] * 200 and record.sampler.startswith("local-oracle:grr")


@pytest.mark.parametrize(
    ("amounts", "match"),
    [
        ([-0.1, 0.1], r"epsilon\[0, 0\]=.* must be a finite number >= 0"),
        ([float("nan"), 0.1], r"epsilon\[0, 0\]=.* must be a finite number >= 0"),
        ([0.1, 0.1, 0.1], r"shape"),
        ([0.0, 0.0], r"epsilon=0 for every user and run would read the data without paying"),
        ("0.1", r"must be"),
    ],
)
def test_bad_amounts_are_refused_naming_the_value(amounts: object, match: str) -> None:
    stream, ledger = _setup([((3, 1.0), 2), ((4, 2.0), 2)], np.zeros((2, 4), dtype=np.int64), 2)
    with pytest.raises(InvalidArgument, match=match):
        ledger.local_report(stream.secret(1), amounts)
    assert ledger.records == () or len(ledger.records) == 0
    with pytest.raises(InvalidArgument, match=r"dimensions=0 must be an integer >= 1"):
        ledger.local_variance([0.1, 0.1], 0)


def test_a_mechanism_cannot_read_a_users_value_or_report() -> None:
    """The obvious routes: the secret itself, numpy, reveal() outside an operation, a second ledger, a
    zero-budget report, another requirement set's stream; and what comes back is one aggregate per bin."""
    bins = np.array([[0, 1, 1, -1]])
    stream, ledger = _setup([((2, 1.0), 4)], bins, 2, runs=1)
    secret = stream.secret(1)
    for attempt in (lambda: float(secret), lambda: np.asarray(secret), lambda: list(secret), lambda: secret[0]):
        with pytest.raises(bc.SecretAccess):
            attempt()
    with pytest.raises(bc.SecretAccess):
        reveal(secret)
    with pytest.raises(bc.SecretAccess):
        PersonalizedLedger(stream.requirements).local_report(secret, [0.5])
    with pytest.raises(InvalidArgument):
        ledger.local_report(secret, [0.0])
    other_requirements = RequirementSet.from_counts([((2, 1.0), 2), ((3, 1.0), 2)])
    other = PersonalizedLedger(other_requirements)
    with pytest.raises((InvalidArgument, bc.SecretAccess)):
        other.local_report(secret, [0.5, 0.5])
    out = ledger.local_report(secret, [0.5])
    assert out.shape == (1, 2)  # one estimate per bin: no per-user values or reports
    assert not any(hasattr(ledger, name) for name in ("reports", "_reports", "users", "bins"))
    (record,) = ledger.records
    assert record.noise_scale is None and record.amounts.shape == (1, 1)  # nothing per user is kept
