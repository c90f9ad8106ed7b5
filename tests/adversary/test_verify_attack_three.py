"""A third outside attack on ``budgetcheck verify``: mechanisms written by a third party against the
public API that verify accepts although they leak, lie about a sensitivity or depart from their
proved rule, a leak route of the ledger itself, and a correct-privacy mechanism whose report is unreadable.

Every test fails on the code it was written against and asserts the behaviour a fix must give:
verify does not say *proved* or *verified to a bound* (exit 0) for a mechanism shown here, in the
same test, to be unsafe where it is actually used. The recurring gap: every stage runs in a small
slice of the public settings (the audit at ε = 1, w ∈ {1, 3}, d = 2, 400 or 4,000 batched runs, the
default relation; non-interference at runs ∈ {2, 3}, T <= 40 and the numpy sampler; replay at T <= 60,
exploration at T <= 256; only ``run``, never the ``releases`` generator ``publish`` drives), and a
mechanism can read which slice it is in from ``ledger.runs``, ``ledger.w``, ``ledger.sampler``,
``stream.length`` or ``stream.neighbours``.

What the fixes give: the shared helpers run ``fn`` with ``isolation="trusted"``, and verify now calls a
mechanism whose own code read true values in its process inconclusive (never a pass), which the
vouched-sensitivity and leak tests assert; the same lies through the default forked ``fn`` stay "verified to a
bound" at the audit's settings, the documented limit of a vouched sensitivity (README, threat model). A
departure from the rule only past T = 256 is not tested here: the ledger refuses it at run time, and the
README states conformance's horizon.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck.ledger.errors import MechanismContractError
from budgetcheck.verify.owner import allowing
from budgetcheck.verify.stages import verify_mechanism
from budgetcheck.verify.verdict import Outcome


@pytest.fixture(autouse=True)
def _owner_allows() -> Iterator[None]:
    """These mechanisms use measure (some with isolation='trusted'): verified as an owner who allows
    in-process code and vouched sensitivities would (verify --trusted-code --allow-vouched)."""
    with allowing(trusted_code=True, allow_vouched=True):
        yield


_HEADER = """
from __future__ import annotations

import attrs
import numpy as np

from budgetcheck import rounding


def uniform_measure(stream, ledger, sensitivity):
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    out = np.zeros((ledger.runs, stream.length, stream.dimensions))
    for secret in stream:
        out[:, secret.t - 1] = ledger.measure(
            lambda v: v, secret, sensitivity=sensitivity, epsilon=budget, isolation="trusted", shape=secret.shape
        )
    return out


def uniform_leaking_when(stream, ledger, leak):
    # the corpus's MeasureKeepsPayload route (isolation="trusted": fn runs in-process and keeps each
    # payload), taken only where ``leak`` holds: there the release is the kept true value itself
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    out = np.zeros((ledger.runs, stream.length, stream.dimensions))
    kept = []

    def counts(values):
        kept.append(np.array(values))
        return np.asarray(values)

    for secret in stream:
        noisy = ledger.measure(counts, secret, sensitivity=1.0, epsilon=budget, isolation="trusted", shape=secret.shape)
        out[:, secret.t - 1] = kept[-1][None, :] if leak else noisy
    return out
"""


def _stages(result: object) -> list[dict[str, object]]:
    return [s.to_json() for s in result.stages]  # type: ignore[attr-defined]


DATA = np.array([[5.0, 7.0], [100.0, 3.0], [42.0, 42.0], [0.0, 9.0], [17.0, 1.0], [8.0, 64.0]])


# -- 1. a vouched sensitivity that lies outside the audit's settings ---------------------------------


def test_measure_sensitivity_that_lies_when_the_ledger_has_one_run_is_not_verified(mechanism_module) -> None:
    """Uniform through measure() that vouches sensitivity 1 when the ledger batches runs (replay's 2-4
    runs, the audit's 400 and 4,000) and 0.01 when it has one run, i.e. when a publisher or a library user
    steps it for real: the releases are the counts plus Laplace(0.03) at ε = 1, w = 3 (a loss of 100ε per
    window). verify: replay pass (vouched), audit pass (it only ever runs batched), verdict "verified to a
    bound", exit 0. Gap: verify/statistical.py runs every pair as one ledger of R runs (execute(...,
    runs=runs)); nothing ties a vouched sensitivity to the runs of its ledger."""
    name = mechanism_module(
        "attack3_lies_alone",
        """
        @attrs.frozen
        class Mech:
            name: str = "measure-lies-when-alone"

            def run(self, stream, ledger):
                return uniform_measure(stream, ledger, 1.0 if ledger.runs > 1 else 0.01)
        """,
    )
    mech = bc.load_mechanism(f"{name}:Mech")
    alone = bc.execute(mech, DATA, epsilon=1.0, w=3, runs=1, seed=0, trusted_code=True, allow_vouched=True).releases[0]
    assert np.max(np.abs(alone - DATA)) < 2.0  # the truth: one run releases the counts almost exactly
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert result.outcome is not Outcome.BOUNDED and not result.passed, _stages(result)  # found: verified to a bound


def test_measure_sensitivity_that_lies_for_windows_wider_than_three_is_not_verified(mechanism_module) -> None:
    """Uniform through measure() that vouches sensitivity 1 for w <= 3 and 0.01 for w >= 4 (an author's
    'calibration' for long windows). At w = 10 the releases are the counts plus Laplace(0.1): 100ε per
    window. verify: audit pass, verdict "verified to a bound", exit 0: the statistical audit runs only at
    w = 1 and w = 3 (verify/stages.py _statistical_stage: ``for w in (1, 3)``), and replay at larger w
    cannot judge a vouched sensitivity."""
    name = mechanism_module(
        "attack3_lies_wide",
        """
        @attrs.frozen
        class Mech:
            name: str = "measure-lies-wide-windows"

            def run(self, stream, ledger):
                return uniform_measure(stream, ledger, 1.0 if ledger.params.w <= 3 else 0.01)
        """,
    )
    mech = bc.load_mechanism(f"{name}:Mech")
    wide = bc.execute(mech, DATA, epsilon=1.0, w=10, runs=1, seed=0, trusted_code=True, allow_vouched=True).releases[0]
    assert np.max(np.abs(wide - DATA)) < 5.0  # the truth: at w = 10 the counts come out almost exactly
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert not result.passed, _stages(result)  # found: verified to a bound


def test_measure_with_sensitivity_one_on_an_across_bins_stream_is_not_verified(mechanism_module) -> None:
    """An honest-looking Uniform through measure(lambda v: v, sensitivity=1.0): right for the default
    relation one_bin(), but the README's own across_bins(k) / one_bin(k) streams have an L1 sensitivity
    of k, and measure() takes the 1.0 whatever ``stream.neighbours`` says (laplace() would derive k). On
    an across_bins(5) stream every window loses 5ε. verify says "verified to a bound", exit 0: every stage
    builds GuardedStream(data) with the default relation (strategies, interference, statistical), so the
    mechanism's ignoring the relation is never exercised."""
    name = mechanism_module(
        "attack3_relation",
        """
        @attrs.frozen
        class Mech:
            name: str = "measure-sensitivity-one"

            def run(self, stream, ledger):
                return uniform_measure(stream, ledger, 1.0)
        """,
    )
    stream = bc.GuardedStream(DATA, neighbours=bc.Neighbours.across_bins(5))
    ledger = bc.WindowLedger(epsilon=1.0, w=3, keep_records=True, trusted_code=True, allow_vouched=True)
    bc.load_mechanism(f"{name}:Mech").run(stream, ledger)  # the truth: accepted at 1/5 of the derived sensitivity
    with pytest.raises(bc.InvalidArgument):
        ledger.laplace(bc.GuardedStream(DATA, neighbours=bc.Neighbours.across_bins(5)).secret(1), 0.1, sensitivity=1.0)
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert not result.passed, _stages(result)  # found: verified to a bound


# -- 2. a leak gated on a setting the non-interference check never uses ------------------------------


def test_a_leak_only_under_the_production_sampler_is_caught(mechanism_module) -> None:
    """Uniform through measure() at ε/w (sensitivity 1, honest) whose isolation="trusted" function keeps
    each payload, as the corpus's MeasureKeepsPayload does, and publishes the kept true counts whenever
    ``ledger.sampler`` is not "numpy-laplace". Every ledger verify builds (replay through execute,
    non-interference, exploration, audit) uses the numpy sampler; a WindowLedger as a publisher or a
    library user makes it uses the default discrete one. verify: secret access pass, "verified to a
    bound", exit 0; the production ledger releases the counts exactly. Gap: verify/interference.py
    _settings and _setting_of pin sampler="numpy-laplace"."""
    name = mechanism_module(
        "attack3_sampler",
        """
        @attrs.frozen
        class Mech:
            name: str = "leaks-under-the-default-sampler"

            def run(self, stream, ledger):
                return uniform_leaking_when(stream, ledger, ledger.sampler != "numpy-laplace")
        """,
    )
    mech = bc.load_mechanism(f"{name}:Mech")
    production = mech.run(
        bc.GuardedStream(DATA), bc.WindowLedger(epsilon=1.0, w=3, trusted_code=True, allow_vouched=True)
    )
    assert np.array_equal(production[0], DATA)  # the truth: the true counts, released as they are
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert_not_verified_for_in_process_code(result)


def assert_not_verified_for_in_process_code(result: object) -> None:
    """The leak is gated on a setting no stage runs, so verify cannot observe it; what it can observe is that
    the mechanism's own code read true values in its process (isolation="trusted"): never a pass."""
    assert result.outcome in (Outcome.VIOLATED, Outcome.INCONCLUSIVE) and not result.passed, _stages(result)  # type: ignore[attr-defined]
    (secret,) = [s for s in result.stages if s.stage == "secret access"]  # type: ignore[attr-defined]
    assert secret.verdict != "pass" and "isolation='trusted'" in secret.detail, secret


@pytest.mark.parametrize(
    ("gate", "length"),
    [
        pytest.param("ledger.runs == 1", 6, id="one-run"),
        pytest.param("stream.length > 64", 100, id="long-stream"),
    ],
)
def test_a_leak_outside_the_non_interference_settings_is_caught(mechanism_module, gate: str, length: int) -> None:
    """The same kept-payload leak gated on a public setting the non-interference check never uses: one
    run (a live publisher, ``execute(..., runs=1)``; the fixed pairs use runs = 3, the generated ones
    runs = 2, the audit 400 or 4,000) or a stream longer than 64 (fixed pairs T = 24, generated T <= 40).
    Replay draws runs = 1 and T <= 60 but cannot see a leak that reads no Secret. verify: secret access
    pass, "verified to a bound", exit 0, while ``execute`` returns the true counts."""
    name = mechanism_module(
        f"attack3_gate_{length}",
        f"""
        @attrs.frozen
        class Mech:
            name: str = "leaks-outside-the-checked-settings"

            def run(self, stream, ledger):
                return uniform_leaking_when(stream, ledger, {gate})
        """,
    )
    data = np.resize(DATA, (length, 2))
    mech = bc.load_mechanism(f"{name}:Mech")
    assert np.array_equal(
        bc.execute(mech, data, epsilon=1.0, w=3, runs=1, seed=0, trusted_code=True, allow_vouched=True).releases[0],
        data,
    )
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert_not_verified_for_in_process_code(result)


def test_an_above_threshold_statistic_does_not_get_the_true_values_in_the_mechanisms_process() -> None:
    """The README's threat model: "a measured function runs in a forked child, so a closure ... never reaches
    the mechanism's process". ledger.above_threshold(...).query(secret, statistic, thresholds) calls the
    mechanism's ``statistic`` in-process on the true footprint values (ledger/threshold.py ThresholdTest._query:
    ``statistic(masked)`` inside ``charged(secret)``), with no isolation and no ``isolation="trusted"`` opt-out
    asked for. A closure keeps them; on a production ledger (default discrete sampler, one run) the mechanism
    then publishes every true count from t = 2 on, having paid one AboveThreshold query of ε/w per t. (verify
    catches this ungated; gated as in the tests above it does not, and no opt-out is needed.)"""
    data = np.array([[5.0, 7.0], [100.0, 3.0], [42.0, 42.0], [0.0, 9.0], [17.0, 1.0]])
    ledger = bc.WindowLedger(epsilon=1.0, w=3, allow_vouched=True)  # an owner who allows its own statistic
    stream = bc.GuardedStream(data)
    test = ledger.above_threshold(epsilon=1.0 / 3.0 - 1e-12, sensitivity=2.0, cells=(2,))
    kept: list[np.ndarray] = []

    def statistic(footprints: np.ndarray) -> np.ndarray:
        kept.append(np.array(footprints))
        return np.zeros((footprints.shape[0], footprints.shape[2]))

    for secret in stream:
        test.query(secret, statistic, 1e12)
    seen = np.array([np.nan_to_num(k[0, -1]) for k in kept])
    assert not np.array_equal(seen, data[1:]), seen  # found: the true counts of t = 2..5, exactly


# -- 3. "proved" for code that departs from its rule on realistic stream lengths ---------------------


def test_proved_is_not_given_to_a_mechanism_that_vouches_for_a_sensitivity_on_long_streams(mechanism_module) -> None:
    """Exposes PeriodicRule(every=1) and charges exactly its ε/w at every t (purpose "publication"), but
    on a stream longer than 60 releases each count through measure(identity, sensitivity=0.01): the
    counts plus Laplace(0.01·w/ε), about 100ε per window. verify (even --require proof): every stage pass,
    verdict *proved*, exit 0. The README: "a mechanism that vouches for a sensitivity is never proved";
    but ``vouched`` is taken from the replay stage only (verify/stages.py _check_case, VerifyResult.vouched),
    whose streams are at most --max-length = 60 long; exploration (T <= 256) and rule conformance see the
    measure() charges and do not count them."""
    name = mechanism_module(
        "attack3_vouches_long",
        """
        from mechanisms.rules import PeriodicRule


        @attrs.frozen
        class Mech:
            name: str = "proved-but-measures-long-streams"

            def allocation_rule(self):
                return PeriodicRule(every=1)

            def run(self, stream, ledger):
                budget = rounding.share(ledger.params.epsilon, ledger.params.w)
                out = np.zeros((ledger.runs, stream.length, stream.dimensions))
                for s in stream:
                    if stream.length <= 60:
                        out[:, s.t - 1] = ledger.laplace(s, budget)
                    else:
                        out[:, s.t - 1] = ledger.measure(
                            lambda v: v, s, sensitivity=0.01, epsilon=budget, isolation="trusted", shape=s.shape,
                            purpose="publication",
                        )
                return out
        """,
    )
    data = np.resize(DATA, (100, 2))
    ledger = bc.execute(
        bc.load_mechanism(f"{name}:Mech"), data, epsilon=1.0, w=3, runs=1, seed=0, trusted_code=True, allow_vouched=True
    )
    assert ledger.ledger.vouched > 0  # the truth: vouched, and the counts come out almost exactly
    assert np.max(np.abs(ledger.releases[0] - data)) < 2.0
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert result.outcome is not Outcome.PROVED, _stages(result)  # found: proved


def test_a_live_releases_generator_that_departs_from_run_is_not_proved(mechanism_module, tmp_path: Path) -> None:
    """``budgetcheck publish`` (and ``bc.publish``) drive a mechanism through its ``releases(stream, ledger)``
    generator, not ``run``. A third party's mechanism whose run() is Uniform (PeriodicRule(every=1), proved)
    and whose releases() charges the same ε/w but releases each row through measure(identity,
    sensitivity=0.01): the published rows are the counts ± 0.01 (100ε per window). verify never calls
    releases() (verify/stages.py, explore.py, interference.py and statistical.py all go through execute /
    execute_on, i.e. run()), and says *proved*, exit 0 even with --require proof."""
    name = mechanism_module(
        "attack3_live",
        """
        from mechanisms.rules import PeriodicRule


        @attrs.frozen
        class Mech:
            name: str = "live-path-differs"

            def allocation_rule(self):
                return PeriodicRule(every=1)

            def run(self, stream, ledger):
                budget = rounding.share(ledger.params.epsilon, ledger.params.w)
                return np.stack([ledger.laplace(s, budget) for s in stream], axis=1)

            def releases(self, stream, ledger):
                budget = rounding.share(ledger.params.epsilon, ledger.params.w)
                for s in stream:
                    yield ledger.measure(
                        lambda v: v, s, sensitivity=0.01, epsilon=budget, shape=s.shape, purpose="publication"
                    )
        """,
    )
    out = io.StringIO()
    rows = [f"{t},{int(a)},{int(b)}" for t, (a, b) in enumerate(DATA, start=1)]
    mech = bc.load_mechanism(f"{name}:Mech")
    bc.publish(mech, rows, tmp_path / "l.db", dimensions=2, epsilon=1.0, w=3, out=out, allow_vouched=True)
    published = np.array([[float(x) for x in line.split(",")[1:]] for line in out.getvalue().splitlines()])
    assert np.max(np.abs(published - DATA)) < 2.0  # the truth: the live publisher releases the counts
    result = verify_mechanism(f"{name}:Mech", examples=20)
    assert not result.passed, _stages(result)  # found: proved


# -- 4. the report of a mechanism that fails everywhere --------------------------------------------


def test_an_exploration_that_fails_everywhere_reports_the_error_once(mechanism_module) -> None:
    """A third party's Uniform of the total that returns (runs, T, 1, 1) instead of (runs, T, d): every
    explored run fails with the same MechanismContractError, and the exploration stage's detail joins all
    of them ("no run completed: ...; ...; ..."): about 100 copies, over 15,000 characters, for one error.
    The message should name the error once (with a count), as the replay stage does."""
    name = mechanism_module(
        "attack3_shape",
        """
        from budgetcheck import Total


        @attrs.frozen
        class Mech:
            name: str = "total-with-extra-axis"

            def run(self, stream, ledger):
                budget = rounding.share(ledger.params.epsilon, ledger.params.w)
                return np.stack([ledger.laplace_query(s, Total(), budget) for s in stream], axis=1)[:, :, None]
        """,
    )
    # Now a broken contract is the author's error before any stage runs (exit 2 in the CLI), named once.
    with pytest.raises(MechanismContractError) as raised:
        verify_mechanism(f"{name}:Mech", examples=5, stages="e")
    assert str(raised.value).count("returned shape") == 1 and f"{name}.py:" in str(raised.value)
