"""Pan-private accounting (Kellaris et al. 2014, §4.5): held releases, exposures, announced intrusions."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import BudgetExceeded, GuardedStream, InvalidArgument, WindowLedger, audit_windows
from budgetcheck.ledger.intrusions import EXPOSURE
from budgetcheck.ledger.records import SpendRecord


def _ledger(epsilon: float = 1.0, w: int = 4, runs: int = 1) -> WindowLedger:
    return WindowLedger(epsilon=epsilon, w=w, runs=runs, seed=3, sampler="numpy-laplace", keep_records=True)


def _secrets(length: int, d: int = 2) -> list:  # type: ignore[type-arg]
    return list(GuardedStream(np.arange(length * d, dtype=np.float64).reshape(length, d)))


def _oracle_ok(ops: list[tuple[int, Fraction, bool]], w: int, epsilon: Fraction) -> bool:
    """Independent check: every window's spends + its largest exposure <= ε (a skipped hold exposes)."""
    spent: dict[int, Fraction] = {}
    exposed: dict[int, Fraction] = {}
    for t, amount, published in ops:
        table = spent if published else exposed
        table[t] = table.get(t, Fraction(0)) + amount
    last = max(t for t, _, _ in ops)
    for end in range(1, last + 1):
        inside = range(max(1, end - w + 1), end + 1)
        total = sum((spent.get(t, Fraction(0)) for t in inside), Fraction(0))
        if total + max((exposed.get(t, Fraction(0)) for t in inside), default=Fraction(0)) > epsilon:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(
    w=st.integers(1, 8),
    plan=st.lists(
        st.tuples(st.sampled_from([0.05, 0.1, 0.125, 0.2, 0.25, 1 / 3, 0.5]), st.booleans()), min_size=1, max_size=24
    ),
)
def test_every_accepted_hold_keeps_each_window_within_epsilon_and_refusals_are_needed(
    w: int, plan: list[tuple[float, bool]]
) -> None:
    """A random sequence of holds (one per timestamp, published or not): the ledger accepts exactly
    those whose publication would keep Σ + max exposure <= ε, and a refusal changes nothing."""
    ledger = _ledger(w=w)
    accepted: list[tuple[int, Fraction, bool]] = []
    for secret, (amount, publish) in zip(_secrets(len(plan)), plan, strict=False):
        before = (ledger.remaining(secret.t).tolist(), len(ledger.records))
        allowed = _oracle_ok([*accepted, (secret.t, Fraction(amount), True)], w, Fraction(1))
        try:
            values = ledger.held_laplace(secret, amount, publish)
        except BudgetExceeded:
            assert not allowed
            assert (ledger.remaining(secret.t).tolist(), len(ledger.records)) == before
            continue
        assert allowed
        assert np.isnan(values).all() != publish  # a skipped hold is discarded inside the ledger
        accepted.append((secret.t, Fraction(amount), publish))
    assert not accepted or _oracle_ok(accepted, w, Fraction(1))
    assert audit_windows(ledger.records, epsilon=1.0, w=w, runs=1).ok


@pytest.mark.parametrize("w", [1, 2, 7, 64])
@pytest.mark.parametrize("exposed_at", ["first", "middle", "last"])
def test_remaining_after_an_exposure_is_exact(w: int, exposed_at: str) -> None:
    """An exposure anywhere in a window: spending remaining() is accepted, one ulp more is refused."""
    ledger = _ledger(epsilon=1.0, w=w)
    secrets = _secrets(w)
    where = {"first": 0, "middle": w // 2, "last": w - 1}[exposed_at]
    for secret in secrets[:where]:
        ledger.spend(secret.t, 0.1 / w, purpose="dissimilarity")
    ledger.held_laplace(secrets[where], 0.3, False)
    t = secrets[-1].t
    left = float(ledger.remaining(t)[0])
    assert left == pytest.approx(1.0 - 0.1 * where / w - 0.3, abs=1e-12)
    with pytest.raises(BudgetExceeded, match="largest exposure"):
        ledger.spend(t, np.nextafter(left, 2.0), purpose="publication")
    ledger.spend(t, left, purpose="publication")
    assert audit_windows(ledger.records, epsilon=1.0, w=w, runs=1).ok
    assert float(ledger.remaining(t)[0]) < 1e-15  # what is left is below one ulp of what was spent


def test_the_largest_exposure_counts_not_the_sum() -> None:
    """A single intrusion reads one timestamp: two exposures of 0.4 in one window cost 0.4, not 0.8."""
    ledger = _ledger(epsilon=1.0, w=3)
    a, b, c = _secrets(3)
    ledger.held_laplace(a, 0.4, False)
    ledger.held_laplace(b, 0.4, False)
    ledger.spend(c.t, 0.6, purpose="publication")  # 0.6 + max(0.4, 0.4) = 1.0
    assert float(ledger.remaining(c.t)[0]) == 0.0
    assert [r.purpose for r in ledger.records] == ["publication", EXPOSURE, "publication", EXPOSURE, "publication"]


def test_runs_are_held_separately() -> None:
    ledger = _ledger(epsilon=1.0, w=2, runs=3)
    a, b = _secrets(2)
    ledger.held_laplace(a, np.array([0.5, 0.5, 0.0]), np.array([False, True, False]))
    assert ledger.remaining(b.t).tolist() == [0.5, 0.5, 1.0]
    with pytest.raises(BudgetExceeded, match="run 0"):
        ledger.spend(b.t, np.array([0.6, 0.0, 0.0]), purpose="publication")


def test_an_announced_intrusion_forces_publication_and_costs_nothing_elsewhere() -> None:
    ledger = _ledger(epsilon=1.0, w=2, runs=2)
    ledger.announce_intrusion(2)
    a, b, c = _secrets(3)
    first = ledger.held_laplace(a, 0.5, np.array([False, False]), intrusions="announced")
    forced = ledger.held_laplace(b, 0.5, np.array([False, True]), intrusions="announced")
    assert np.isnan(first).all() and not np.isnan(forced).any()
    assert ledger.intrusion_announced(2) and not ledger.intrusion_announced(3)
    assert [r.purpose for r in ledger.records if r.purpose == EXPOSURE] == []  # a discarded value is never read
    assert ledger.remaining(c.t).tolist() == [0.5, 0.5]  # the forced publication at t = 2 is charged
    with pytest.raises(InvalidArgument, match="t=1"):
        ledger.announce_intrusion(1)  # its held value is gone: the announcement could not be honoured


def test_models_do_not_mix_and_bad_input_is_named() -> None:
    ledger = _ledger()
    a, b = _secrets(2)
    with pytest.raises(InvalidArgument, match="intrusions='twice'"):
        ledger.held_laplace(a, 0.1, False, intrusions="twice")
    with pytest.raises(InvalidArgument, match="publish"):
        ledger.held_laplace(a, 0.1, np.array([1.0]))
    with pytest.raises(InvalidArgument, match="reserved"):
        ledger.held_laplace(a, 0.1, False, purpose=EXPOSURE)
    ledger.held_laplace(a, 0.1, False)
    assert ledger.intrusions == "single"
    with pytest.raises(InvalidArgument, match="'single' model"):
        ledger.held_laplace(b, 0.1, False, intrusions="announced")
    with pytest.raises(InvalidArgument, match="'single' model"):
        ledger.announce_intrusion(5)


def test_the_audit_adds_the_largest_exposure_of_every_window() -> None:
    one = np.array([0.5])
    records = [
        SpendRecord(t=1, purpose=EXPOSURE, amounts=np.array([0.25])),
        SpendRecord(t=2, purpose="publication", amounts=one),
        SpendRecord(t=3, purpose=EXPOSURE, amounts=np.array([0.5])),
    ]
    report = audit_windows(records, epsilon=1.0, w=2, runs=1)
    assert report.ok and report.worst_ratio == 1  # [2, 3]: 0.5 + 0.5
    over = audit_windows(
        [*records, SpendRecord(t=3, purpose="dissimilarity", amounts=np.array([2.0**-50]))], epsilon=1.0, w=2, runs=1
    )
    assert not over.ok and (over.violations[0].start, over.violations[0].end) == (2, 3)
    # without the exposure records the same spends are far within ε: the exposures are what count
    assert audit_windows(records[1:2], epsilon=1.0, w=2, runs=1).worst_ratio == Fraction(1, 2)


def test_an_intruder_reads_the_held_value_and_changes_nothing() -> None:
    """LedgerAccess.intrude(t): what the verifier's intruder reads is every value held at t, the
    published ones equal to their release and the discarded ones c_t with their noise; the run's
    releases, charges and noise are those of the same seed without the intruder."""
    from budgetcheck.ledger.access import LedgerAccess

    data = np.full((5, 2), 40.0)
    publish = np.array([True, False, True])

    def run(intruded: int | None) -> tuple[WindowLedger, list[np.ndarray], LedgerAccess]:
        ledger = WindowLedger(epsilon=1.0, w=4, runs=3, seed=11, sampler="numpy-laplace", keep_records=True)
        access = LedgerAccess(ledger)
        if intruded is not None:
            access.intrude(intruded)
        stream = GuardedStream(data)
        ledger.bind(stream)
        out = [ledger.held_laplace(secret, 0.05, publish) for secret in stream]
        return ledger, out, access

    plain, released, _ = run(None)
    ledger, watched, access = run(3)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(released, watched, strict=True))
    assert [(r.t, r.purpose, list(r.amounts)) for r in ledger.records] == [
        (r.t, r.purpose, list(r.amounts)) for r in plain.records
    ]
    (read,) = access.intruder_read()
    assert read.shape == (3, 2) and np.isfinite(read).all()
    assert np.array_equal(read[publish], watched[2][publish])  # published: the intruder reads the release
    assert np.isnan(watched[2][~publish]).all()  # discarded: only the intruder sees it, near c_t = 40
    assert abs(read[~publish] - 40.0).max() < 400.0 and not np.array_equal(read[~publish], np.full((1, 2), 40.0))
    other = LedgerAccess(_ledger())
    with pytest.raises(InvalidArgument, match="no intrusion was placed"):
        other.intruder_read()
    with pytest.raises(InvalidArgument, match="t=0"):
        other.intrude(0)
