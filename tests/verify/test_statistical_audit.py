"""Stage (d): neighbour pairs, decision flips, and bounds for the three notions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from broken.mutants import (
    BDDissimilarityOverPopulation,
    PrefixCountsDeclaresOne,
    RescueDPGroupMeanNoise,
    SwellfishMeasureThresholdUnits,
    SwellfishThresholdUnits,
    UniformHoldsAPreciseCopy,
)
from budgetcheck import InvalidArgument, execute, load_mechanism, verify_mechanism
from budgetcheck.mechanism.execute import execute_personalized, notion_of
from budgetcheck.verify.owner import allowing
from budgetcheck.verify.stages import _statistical_stage
from budgetcheck.verify.statistical import (
    NeighbourPair,
    Run,
    _audit,
    decision_flip,
    intruder_pairs,
    personalized_audit,
    population_pair,
    statistical_audit,
    swellfish_audit,
)
from mechanisms import BUILTIN


@pytest.fixture(autouse=True)
def _owner_allows() -> Iterator[None]:
    """These mechanisms use measure (some with isolation='trusted'): verified as an owner who allows
    in-process code and vouched sensitivities would (verify --trusted-code --allow-vouched)."""
    with allowing(trusted_code=True, allow_vouched=True):
        yield


def _pilot(name: str, w: int = 3) -> Run:
    mechanism = load_mechanism(name)
    return lambda data, seed: (
        execute(mechanism, data, epsilon=1.0, w=w, runs=400, seed=seed, trusted_code=True, allow_vouched=True).releases
    )


def test_decision_flip_brackets_the_share_of_publishing_runs() -> None:
    base = np.zeros((9, 1))
    height = decision_flip(_pilot("BD"), base, 0, seed=1)
    assert height is not None

    def rate(h: int) -> float:
        data = base.copy()
        data[0] += h
        releases = _pilot("BD")(data, 1)
        return float(np.mean(releases[:, 0, 0] != 0.0))

    assert rate(height) < 0.5 <= rate(height + 1)


def test_no_decision_flip_for_mechanisms_that_release_every_time() -> None:
    base = np.full((9, 1), 50.0)
    assert decision_flip(_pilot("Uniform"), base, 4, seed=1) is None
    assert decision_flip(_pilot("Sample"), base, 4, seed=1) is None


def test_the_flip_pair_is_what_catches_a_decision_with_a_made_up_sensitivity() -> None:
    """BD whose dissimilarity has 1/100 of its sensitivity: right charges, a near-true decision."""
    finding = statistical_audit(BDDissimilarityOverPopulation(), w=1, runs=4000, seed=0)
    assert finding.violates and "decision flip" in finding.position
    honest = statistical_audit(load_mechanism("BD"), w=1, runs=4000, seed=0)
    assert not honest.violates


def test_personalized_audit_compares_each_user_with_their_own_epsilon() -> None:
    finding = personalized_audit(load_mechanism("PBA"), runs=2000, seed=3)
    assert not finding.violates
    assert finding.epsilon in (0.5, 1.0, 8 * 0.5, 8 * 1.0) and "user" in finding.position  # one user or a group of 8


def test_swellfish_audit_catches_noise_that_ignores_the_temporal_sensitivity() -> None:
    with pytest.raises(InvalidArgument, match="is below"):  # declared to laplace: refused at run time
        swellfish_audit(SwellfishThresholdUnits(), runs=200, seed=0)
    vouched = swellfish_audit(SwellfishMeasureThresholdUnits(), runs=2000, seed=0)  # vouched to measure: the audit
    assert vouched.violates
    honest = swellfish_audit(load_mechanism("TSUniform"), runs=2000, seed=0)
    assert not honest.violates and "pattern" in honest.position


# -- issue 28, item 5 -------------------------------------------------------------------------------------


def _one_column_audit(mechanism: object, w: int, runs: int) -> float:
    """The audit as it was before issue 28: d = 1 streams, ±1 at one timestamp, one column read."""
    from budgetcheck.verify.statistical import NeighbourPair, _audit

    base = np.full((3 * w, 1), 50.0)
    pairs = []
    for position in (w, 2 * w - 1):
        for direction in (1.0, -1.0):
            neighbour = base.copy()
            neighbour[position, 0] += direction
            pairs.append(NeighbourPair("old", base, neighbour, (position,), direction, 0, 1.0))

    def run(data: np.ndarray, seed: int) -> np.ndarray:
        return execute(
            mechanism, data, epsilon=1.0, w=w, runs=runs, seed=seed, trusted_code=True, allow_vouched=True
        ).releases  # type: ignore[arg-type]

    return _audit(run, pairs, runs=runs, alpha=0.05, seed=0, w=w).lower_bound


def test_a_vector_query_with_l1_sensitivity_2_declaring_1_is_caught_only_at_d_2() -> None:
    """Class 3: the cumulative histogram moves both columns when one individual joins bin 0 (loss 2ε
    at w = 1). The old one-column audit stays below ε; the d = 2 audit proves a loss above ε."""
    assert _one_column_audit(PrefixCountsDeclaresOne(), 1, 4000) <= 1.0
    finding = statistical_audit(PrefixCountsDeclaresOne(), w=1, runs=4000, seed=0)
    assert finding.violates and finding.lower_bound > 1.0 and "bin 0" in finding.position, finding
    stage = {s.stage: s for s in verify_mechanism("broken.mutants:PrefixCountsDeclaresOne", stages="d").stages}
    assert stage["statistical audit"].verdict == "fail", stage


def test_the_moved_neighbour_is_held_to_two_epsilon_not_one() -> None:
    """A correct histogram (Uniform at d = 2) loses up to 2ε when one individual moves between bins:
    the pair must be compared with 2ε or every correct histogram mechanism would be a false alarm."""
    finding = statistical_audit(load_mechanism("Uniform"), w=1, runs=4000, seed=0)
    assert not finding.violates


def test_the_linear_event_sees_a_change_at_a_later_timestamp() -> None:
    """Weights chosen on one half over every (t, column): a mechanism that releases the change one
    timestamp late (at t + 1, in the last column) is invisible to the changed-timestamp statistics."""
    from budgetcheck import GuardedStream, WindowLedger, rounding

    class Late:
        name = "late"

        def run(self, stream: GuardedStream, ledger: WindowLedger) -> np.ndarray:
            budget = rounding.share(ledger.params.epsilon, ledger.params.w)
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            for secret in stream:
                noisy = ledger.measure(
                    lambda v: v,
                    secret,
                    sensitivity=0.25,
                    epsilon=budget,  # too little noise,
                    isolation="trusted",
                    shape=secret.shape,
                )  # shown late
                if secret.t < stream.length:
                    out[:, secret.t, -1] = noisy[:, 0]
            return out

    finding = statistical_audit(Late(), w=1, runs=4000, seed=0)
    assert finding.violates and "linear event" in finding.position, finding


def test_tssample_has_a_positive_bound_now() -> None:
    """TSSample was left at 0.000 when the pattern sat only at the start and end of J."""
    finding = swellfish_audit(load_mechanism("TSSample"), runs=4000, seed=0)
    assert 0.3 < finding.lower_bound <= finding.epsilon, finding


# -- issue 28, item 5: power on every built-in --------------------------------------------------------


_ONCE_ZERO = ("RescueDP", "PBD", "StrictestBD", "StrictestBA", "TSSample", "TSBD")  # bound 0.000 before issue 28


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_passes_the_audit_with_a_positive_bound(name: str) -> None:
    """No false alarm, and no built-in left at 0: the stage as `verify` runs it (quick: 4,000 runs)."""
    mechanism = load_mechanism(name)
    stage = _statistical_stage(mechanism, notion_of(mechanism), 4000, 0)
    assert stage.verdict == "pass", stage
    bound = float(stage.detail.split("loss lower bound ")[1].split()[0])
    assert bound > 0.0, stage


@pytest.mark.parametrize("name", _ONCE_ZERO)
def test_the_bound_never_exceeds_the_epsilon_of_its_pair(name: str) -> None:
    """The bound is a lower bound: at most the ε that protects its pair (k ε for a group of k), on an
    independent seed; and for the group pairs that k ε is needed (the bound is above one ε for some)."""
    mechanism = load_mechanism(name)
    notion = notion_of(mechanism)
    if notion == "personalized":
        findings = [personalized_audit(mechanism, runs=4000, seed=7)]  # type: ignore[arg-type]
    elif notion == "swellfish":
        findings = [swellfish_audit(mechanism, runs=4000, seed=7)]  # type: ignore[arg-type]
    else:
        findings = [statistical_audit(mechanism, w=w, runs=4000, seed=7) for w in (1, 3)]  # type: ignore[arg-type]
    for finding in findings:
        assert 0.0 < finding.lower_bound <= finding.epsilon, finding


def test_a_group_pair_is_held_to_k_epsilon() -> None:
    """Uniform at w = 1 spends ε at every t: eight individuals lose up to 8ε, and the audit proves
    more than ε for them. Held to ε, that pair would fail a correct mechanism."""
    from budgetcheck.verify.statistical import NeighbourPair, _audit

    uniform = load_mechanism("Uniform")
    base = np.full((3, 2), 50.0)
    group = base.copy()
    group[0, 0] += 8

    def run(data: np.ndarray, seed: int) -> np.ndarray:
        return execute(
            uniform, data, epsilon=1.0, w=1, runs=4000, seed=seed, trusted_code=True, allow_vouched=True
        ).releases

    finding = _audit(
        run, [NeighbourPair("group of 8", base, group, (0,), 1.0, 0, 8.0)], runs=4000, alpha=0.05, seed=0, w=1
    )
    assert 1.0 < finding.lower_bound <= 8.0, finding
    assert not statistical_audit(uniform, w=1, runs=4000, seed=0).violates


def test_a_rescuedp_twin_is_caught_only_where_rescuedp_publishes() -> None:
    """RescueDP on a steady stream samples at t = 1 and then predicts: a twin whose samples have the
    noise of a group mean (loss 1.6ε) shows nothing at the positions the audit used to change (inside
    a later window), and is caught by the pair at t = 1."""
    from budgetcheck.verify.statistical import NeighbourPair, _audit

    twin = RescueDPGroupMeanNoise()
    for w in (1, 3):
        base = np.full((3 * w, 2), 50.0)
        pairs = []
        for position in sorted({w, w + w // 2, 2 * w - 1}):  # the placements of the audit before issue 28
            for direction in (1.0, -1.0):
                neighbour = base.copy()
                neighbour[position, 0] += direction
                pairs.append(NeighbourPair("inside a later window", base, neighbour, (position,), direction, 0, 1.0))

        def run(data: np.ndarray, seed: int, w: int = w) -> np.ndarray:
            return execute(
                twin, data, epsilon=1.0, w=w, runs=4000, seed=seed, trusted_code=True, allow_vouched=True
            ).releases

        assert _audit(run, pairs, runs=4000, alpha=0.05, seed=0, w=w).lower_bound == 0.0
        finding = statistical_audit(twin, w=w, runs=4000, seed=0)
        assert finding.violates and finding.lower_bound > 1.0 and "first timestamp" in finding.position, finding
    stage = {s.stage: s for s in verify_mechanism("broken.mutants:RescueDPGroupMeanNoise", stages="d").stages}
    assert stage["statistical audit"].verdict == "fail", stage
    honest = statistical_audit(load_mechanism("RescueDP"), w=1, runs=4000, seed=0)
    assert not honest.violates and honest.lower_bound > 0.0, honest


def test_each_distinct_input_runs_once_and_pairs_never_share_a_sample() -> None:
    """The cache behind the audit: the shared first input runs once; a pair's two inputs are distinct
    runs with distinct seeds (the two Clopper-Pearson bounds of an event rest on independent samples)."""
    from budgetcheck.verify.statistical import NeighbourPair, _audit

    calls: list[tuple[bytes, int]] = []

    def run(data: np.ndarray, seed: int) -> np.ndarray:
        calls.append((data.tobytes(), seed))
        return np.random.default_rng(seed).laplace(data[None], 1.0, size=(400, *data.shape))

    base = np.zeros((3, 1))
    pairs = []
    for position in range(3):
        neighbour = base.copy()
        neighbour[position, 0] = 1.0
        pairs.append(NeighbourPair(f"t={position}", base, neighbour, (position,), 1.0, 0, 1.0))
    _audit(run, pairs, runs=400, alpha=0.05, seed=5, w=1)
    assert len(calls) == 4 and len({data for data, _ in calls}) == 4 and len({seed for _, seed in calls}) == 4


def test_the_bound_exceeds_the_true_loss_in_at_most_alpha_of_audits() -> None:
    """Coverage of the statistics themselves: a Laplace release of scale 1 whose neighbours differ by
    1 (true loss exactly 1 at every event) and one that ignores its input (true loss 0). Over 100
    independent audits at α = 0.05 the bound must exceed the true loss in at most 5% + slack of them
    (it is conservative: in practice never)."""
    from budgetcheck.verify.statistical import NeighbourPair, _audit

    def audit(shift: float, seed: int) -> float:
        def run(data: np.ndarray, run_seed: int) -> np.ndarray:
            return np.random.default_rng(run_seed).laplace(shift * data[None], 1.0, size=(2000, *data.shape))

        base = np.zeros((3, 2))
        pairs = []
        for position in range(3):
            neighbour = base.copy()
            neighbour[position, 0] = 1.0
            pairs.append(NeighbourPair(f"t={position}", base, neighbour, (position,), 1.0, 0, 1.0))
        return _audit(run, pairs, runs=2000, alpha=0.05, seed=1000 * seed, w=1).lower_bound

    exact = [audit(1.0, seed) for seed in range(100)]
    assert sum(bound > 1.0 for bound in exact) <= 10, sorted(exact)[-10:]
    assert np.median(exact) > 0.3  # and the audit has power on it
    null = [audit(0.0, seed) for seed in range(100)]
    assert sum(bound > 0.0 for bound in null) <= 10, sorted(null)[-10:]


@pytest.mark.parametrize("name", ["LBD", "LBA"])
def test_ldp_ids_is_resolved_by_a_population_not_by_a_group_of_8(name: str) -> None:
    """LBD and LBA (LDP-IDS): every user's report goes through GRR at ε/4 or less, so 8 users moved among
    the audit's 48 shift the aggregate by a tenth of its standard deviation and bound nothing; every
    user of the 2 × 512 population moved over the first window is resolved, and the bound is at most
    the Σ ε_i that protects them (on a seed of its own)."""
    from budgetcheck import RequirementSet

    mechanism = load_mechanism(name)
    requirements = RequirementSet([(2, 0.5)] * 24 + [(3, 1.0)] * 24)
    pair = population_pair(mechanism, requirements, runs=4000)  # type: ignore[arg-type]
    assert pair.epsilon == 512 * 0.5 + 512 * 1.0 and pair.changed == (0, 1, 2)
    assert pair.first.shape == (9, 1024) and (pair.second[:3] == 1).all() and (pair.second[3:] == 0).all()
    population = _audit(pair.run, [pair], runs=4000, alpha=0.05, seed=7, w=3)  # type: ignore[arg-type]
    assert 1.0 < population.lower_bound <= pair.epsilon, population

    def run(bins: np.ndarray, seed: int) -> np.ndarray:
        bins = bins.astype(np.int64)
        return execute_personalized(
            mechanism, requirements, bins, dimensions=2, runs=4000, seed=seed, trusted_code=True, allow_vouched=True
        ).releases  # type: ignore[arg-type]

    base = np.zeros((9, 48))
    group = base.copy()
    group[:3, :8] = 1
    eight = _audit(
        run, [NeighbourPair("8 of 48", base, group, (0, 1, 2), 1.0, 1, 4.0)], runs=4000, alpha=0.05, seed=7, w=3
    )
    assert eight.lower_bound < 0.2 < population.lower_bound, eight


def test_the_intruder_pairs_see_what_the_ledger_held() -> None:
    """Pan-privacy, single unannounced intrusion: the observation of an intruder pair is the releases
    and one more row, the value held at the intruded timestamp (the release where BD published,
    c_τ + noise where it skipped); the honest built-ins stay within the ε of each pair."""
    bd = load_mechanism("BDPanPrivate")
    base = np.full((9, 2), 50.0)
    pairs = intruder_pairs(bd, base, epsilon=1.0, w=3, runs=400)  # type: ignore[arg-type]
    assert [p.epsilon for p in pairs] == [1.0, 8.0] and all(p.changed == (4, 9) for p in pairs)
    observed = pairs[0].run(base, 3)  # type: ignore[misc]
    releases = execute(bd, base, epsilon=1.0, w=3, runs=400, seed=3, trusted_code=True, allow_vouched=True).releases
    assert observed.shape == (400, 10, 2) and np.array_equal(observed[:, :9], releases)
    published = np.any(releases[:, 4] != releases[:, 3], axis=1)
    assert np.array_equal(observed[published, 9], releases[published, 4])
    skipped = observed[~published, 9]
    assert (~published).sum() > 200 and not np.isin(skipped, releases[~published, 4]).any()
    assert abs(float(np.median(skipped)) - 50.0) < 5.0  # c_τ = 50 with the held noise (scale 9 here)
    announced = load_mechanism("BDPanPrivateAnnounced")  # the intrusion is announced: a forced publication
    (pair, _) = intruder_pairs(announced, base, epsilon=1.0, w=3, runs=400)  # type: ignore[arg-type]
    observed = pair.run(base, 3)  # type: ignore[misc]
    assert "announced intrusion" in pair.name and np.array_equal(observed[:, 9], observed[:, 4])
    assert np.all(observed[:, 4] != observed[:, 3])  # every run published at τ
    for name in ("BDPanPrivate", "BAPanPrivate"):
        mechanism = load_mechanism(name)
        for w in (1, 3):
            pairs = intruder_pairs(mechanism, np.full((3 * w, 2), 50.0), epsilon=1.0, w=w, runs=4000)  # type: ignore[arg-type]
            for pair in pairs:
                finding = _audit(pair.run, [pair], runs=4000, alpha=0.05, seed=7, w=w)  # type: ignore[arg-type]
                assert finding.lower_bound <= pair.epsilon, finding


def test_only_the_intruder_pairs_catch_a_precise_copy_held_under_the_wrong_model() -> None:
    """A mechanism that declares the single unannounced model but holds c_t at 4ε under
    ``intrusions="announced"`` (the ledger then records no exposure): its releases are Uniform's and
    every output pair passes; the intruder pair, which reads the held copy, proves more than ε."""
    import attrs

    mutant = UniformHoldsAPreciseCopy()
    finding = statistical_audit(mutant, w=1, runs=4000, seed=0)  # type: ignore[arg-type]
    assert finding.violates and "intrusion reading the held value" in finding.position, finding
    base = np.full((3, 2), 50.0)
    pairs = intruder_pairs(mutant, base, epsilon=1.0, w=1, runs=4000)  # type: ignore[arg-type]

    def outputs(data: np.ndarray, seed: int) -> np.ndarray:
        return execute(
            mutant, data, epsilon=1.0, w=1, runs=4000, seed=seed, trusted_code=True, allow_vouched=True
        ).releases  # type: ignore[arg-type]

    blind = [attrs.evolve(p, changed=p.changed[:1], run=None) for p in pairs]  # the same pairs, outputs only
    assert not _audit(outputs, blind, runs=4000, alpha=0.05, seed=0, w=1).violates
