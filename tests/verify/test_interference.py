"""Stage (b)'s non-interference check: the charged outputs held equal, nothing else may differ."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

from budgetcheck import GuardedStream, WEventParams, WindowLedger, execute, load_mechanism, rounding, verify_mechanism
from budgetcheck.verify.interference import interference
from budgetcheck.verify.tap import install_tap


@attrs.frozen
class _Keeper:
    """Measures the total at ε/w and keeps the payload; ``use`` says where the kept data leaks (only
    with isolation='trusted': a forked fn keeps nothing, see tests/ledger/test_isolation.py)."""

    use: str
    name: str = "keeper"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> Any:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        kept: list[Any] = []
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))

        def total(values: Any) -> float:
            kept.append(np.array(values))
            return float(values.sum())

        for secret in stream:
            cheaper = self.use == "operations" or (self.use == "charge" and kept and kept[-1].sum() > 60)
            noisy = ledger.measure(
                total, secret, sensitivity=1.0, epsilon=budget / 2 if cheaper else budget, isolation="trusted"
            )
            if self.use == "operations" and kept[-1].sum() > 60:
                ledger.laplace(secret, budget / 2)
            out[:, secret.t - 1] = noisy[:, None]
            if self.use == "release":
                out[:, secret.t - 1, 0] += kept[-1][0] * 1e-9
            if self.use == "unseeded":
                out[:, secret.t - 1] += np.random.default_rng().random()
        return out


@pytest.mark.parametrize(
    ("use", "words"),
    [
        ("release", "the releases differ"),
        ("charge", "the charges differ"),
        ("operations", "more charged operations than"),
    ],
)
def test_a_payload_kept_by_a_measure_function_is_found(use: str, words: str) -> None:
    found = interference(_Keeper(use), "w-event")
    assert found is not None and found.kind == "leak" and words in found.detail, found


def test_unseeded_randomness_is_told_apart_from_a_leak() -> None:
    found = interference(_Keeper("unseeded"), "w-event")
    assert found is not None and found.kind == "nondeterministic" and "same stream" in found.detail, found


def test_a_correct_mechanism_of_the_same_shape_shows_nothing() -> None:
    assert interference(_Keeper("nothing"), "w-event") is None


@pytest.mark.parametrize("name", ["PBA", "UnicornPS", "AdaPub", "FASTw"])
def test_built_ins_of_every_notion_and_stateful_tests_show_nothing(name: str) -> None:
    mechanism = load_mechanism(name)
    assert interference(mechanism, getattr(mechanism, "notion", "w-event")) is None


def test_the_tap_does_not_change_what_an_ordinary_run_returns() -> None:
    data = np.arange(12.0).reshape(6, 2)
    plain = execute(load_mechanism("BD"), data, epsilon=1.0, w=3, runs=2, seed=5, trusted_code=True, allow_vouched=True)
    ledger = WindowLedger(WEventParams(epsilon=1.0, w=3), runs=2, seed=5, sampler="numpy-laplace", keep_records=True)
    seen: list[Any] = []
    install_tap(ledger, lambda result: seen.append(result) or result)
    tapped = load_mechanism("BD").run(GuardedStream(data), ledger)
    assert np.array_equal(plain.releases, tapped) and len(seen) == len(plain.ledger.records) > 0


def test_verify_reports_the_flow_as_a_secret_access_failure() -> None:
    result = verify_mechanism("broken.mutants:MeasureKeepsPayload", examples=20, stages="ab")
    stage = {s.stage: s for s in result.stages}["secret access"]
    assert stage.verdict == "fail" and "outside the charged outputs" in stage.detail


@attrs.frozen
class _OneDimensionOnly:
    """Fails on every setting whose stream is not d = 1 (all of them): the check must say it did not run."""

    name: str = "one-dimension-only"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> Any:
        if stream.dimensions != 1:
            raise ValueError(f"needs d = 1, got {stream.dimensions}")
        return np.zeros((ledger.runs, stream.length, 1))


def test_a_mechanism_that_fails_on_the_settings_is_unchecked_not_passed() -> None:
    found = interference(_OneDimensionOnly(), "w-event")
    assert found is not None and found.kind == "unchecked" and "needs d = 1" in found.detail, found


# -- generated pairs (issue 28, item 4) -----------------------------------------------------------------

import ast  # noqa: E402
import re  # noqa: E402
from collections.abc import Iterator  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broken.mutants import LeaksAboveAMillion, LeaksOnThreeEqualCounts  # noqa: E402
from budgetcheck.strategies import StreamPair, stream_pairs  # noqa: E402
from budgetcheck.verify.owner import allowing  # noqa: E402
from budgetcheck.verify.stages import _PAIRS  # noqa: E402


@pytest.fixture(autouse=True)
def _owner_allows() -> Iterator[None]:
    """These mechanisms use measure (some with isolation='trusted'): verified as an owner who allows
    in-process code and vouched sensitivities would (verify --trusted-code --allow-vouched)."""
    with allowing(trusted_code=True, allow_vouched=True):
        yield


def _reported_pair(detail: str) -> tuple[np.ndarray, np.ndarray]:
    match = re.search(r"stream (\[.*?\]\]) against (\[.*?\]\])", detail)
    assert match is not None, detail
    return np.array(ast.literal_eval(match.group(1)), dtype=np.float64), np.array(
        ast.literal_eval(match.group(2)), dtype=np.float64
    )


@pytest.mark.parametrize("mutant", [LeaksAboveAMillion, LeaksOnThreeEqualCounts])
def test_a_leak_that_the_data_triggers_is_missed_by_the_fixed_pairs_and_found_on_generated_ones(mutant: type) -> None:
    """Class 2: the three fixed pairs (Poisson 3 vs 40) never open the route; the generated pairs of the
    quick profile do, and the pair reported is shrunk (a few timestamps, one column) and reproduces."""
    assert interference(mutant(), "w-event") is None  # the old check alone
    found = interference(mutant(), "w-event", examples=_PAIRS)
    assert found is not None and found.kind == "leak" and "generated pair" in found.detail, found
    first, second = _reported_pair(found.detail)
    assert first.shape == second.shape and first.shape[0] <= 3 and first.shape[1] == 1, found.detail
    epsilon, w = re.search(r"epsilon=([0-9.]+), w=(\d+)", found.detail).groups()  # type: ignore[union-attr]
    # replayed by hand: the same pair, outputs held equal, still differs
    from budgetcheck.verify.interference import _check, _setting_of

    flow = _check(mutant(), _setting_of(StreamPair("w-event", first, second, epsilon=float(epsilon), w=int(w))))
    assert flow is not None and getattr(flow, "kind", None) == "leak", flow


def test_the_trigger_is_what_the_reported_pair_has() -> None:
    found = interference(LeaksAboveAMillion(), "w-event", examples=_PAIRS)
    assert found is not None
    first, second = _reported_pair(found.detail)
    assert max(first.max(), second.max()) > 1e6 and min(first.max(), second.max()) <= 1e6, found.detail


@pytest.mark.parametrize("name", ["BD", "PBD", "TSBD", "RescueDP"])
def test_generated_pairs_raise_no_false_alarm(name: str) -> None:
    mechanism = load_mechanism(name)
    assert interference(mechanism, getattr(mechanism, "notion", "w-event"), examples=_PAIRS) is None


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_the_pairs_cover_every_shape_the_issue_names(data: st.DataObject) -> None:
    """Each notion's pairs have one shape for both streams, counts in [0, 10^9] (bins in [-1, d))."""
    notion = data.draw(st.sampled_from(["w-event", "personalized", "swellfish"]))
    pair = data.draw(stream_pairs(notion))
    assert pair.first.shape == pair.second.shape
    if notion == "personalized":
        assert pair.requirements is not None and pair.first.shape[1] == pair.requirements.n_users
        assert pair.first.min() >= -1 and pair.first.max() < pair.dimensions
    else:
        assert 0 <= pair.first.min() and pair.first.max() <= 1e9 and 1 <= pair.first.shape[1] <= 64


def test_the_pairs_reach_the_extremes() -> None:
    """Hypothesis reaches counts of 10^9, d = 64 and three equal consecutive counts above 10^6 (each search
    seeded: an unseeded search of 2,000 examples missed d = 64 once in CI)."""
    from random import Random

    from hypothesis import find

    explore = settings(database=None, max_examples=2000)
    find(stream_pairs("w-event"), lambda p: p.first.max() >= 1e9, settings=explore, random=Random(0))
    find(stream_pairs("w-event"), lambda p: p.first.shape[1] == 64, settings=explore, random=Random(0))
    find(
        stream_pairs("w-event"),
        lambda p: p.first.shape[0] >= 3 and bool((p.first[:3, 0] == p.first[0, 0]).all()) and p.first[0, 0] > 1e6,
        settings=explore,
        random=Random(0),
    )
