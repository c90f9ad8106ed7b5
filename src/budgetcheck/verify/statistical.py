"""Stage (d) of ``verify``: a StatDP-style statistical lower bound on the privacy loss.

For pairs of neighbouring inputs the mechanism runs many seeded times on each (batched: one ledger
of R runs). Output events are "statistic >= τ" for three statistics: the signed sum of the releases
over the changed timestamps; whether the release moved at the first changed timestamp (a
published value differs from the previous release, a skipped one does not); the signed sum
counted only where the release moved (a decision's loss and its release's together); and a linear
statistic over every column and timestamp whose weights are the difference of the two inputs' mean
releases on the first half of the runs (only weights more than three standard errors from 0), so a
change that shows in another column or at a later timestamp is seen (DP-Sniper, Bichsel et al.
2021, and StatDP, Ding et al. 2018: choose the event on one half, test it on the other). Events and
weights are chosen on a first half of the runs; on the second half two one-sided Clopper-Pearson
bounds (each at half the event's level) give, with confidence 1 − α (Bonferroni over every event
tried), ε_lb = ln(p_low(D) / p_high(D')). ε_lb above the ε that protects the change is a violation,
e.g. a release or a decision whose declared sensitivity is too small. Each distinct input is run
once per audit (most pairs share the same first input); a pair's two inputs are always distinct
runs with distinct seeds.

Population pairs (personalized): under a local randomiser (LDP-IDS's LBD and LBA) one report per
user is aggregated over every user, so a group of 8 among the audit's 48 users is lost in the other
users' noise; every user of a population of 2 × 512 moved over the first window is resolved, held to
the sum of their ε_i (:func:`population_pair`).

Intruder pairs (pan-privacy under a single unannounced intrusion, Kellaris et al. 2014 §4.5): the
observation is the releases plus what an intrusion at one timestamp reads, the ledger's held value
there (:func:`intruder_pairs`); held to ε (8ε for a group of 8), as the ledger's Σ spends + largest
exposure <= ε promises. Under announced intrusions there is nothing unannounced to read: the same
pairs announce the intrusion, and the ledger publishes the held value there (a forced publication).

Group pairs (issue 28): one individual's loss at one timestamp is ε_t, often ε/5 or less (RescueDP,
BD/BA's first publication at ε/4, a personalized class at ε_i/(2 w_i) per decision); 4,000 runs per
input resolve a likelihood ratio only to about ±0.15 in ln after the correction, so such pairs
bound the loss by 0 even for a correct mechanism that spends its whole budget. A group of k = 8
individuals (users, stacked patterns) changed over one window multiplies the loss up to k-fold and
is held to k ε (group privacy: a chain of k neighbours), so the bound stays valid and is positive
for every built-in.

Neighbours, per notion (streams of d = 2: one individual sits in one bin per timestamp):
- w-event: one individual added to or removed from bin 0 (±1) at t = 1 (where every built-in
  publishes) and at the start, middle and end of a window of a constant stream, and moved from bin 0
  to bin 1 (two such steps: compared with 2ε); a group of 8 added to bin 0 over the first window (8ε);
  and where the mechanism's decision flips: a spike of height h at one timestamp (t = 1 of a zero
  stream, and mid-window of the constant one), with h found by bisection so that about half of the
  runs publish there; the spikes h − 1, h, h + 1 against one more;
- personalized (Du et al. 2025): one user moved to another bin at one timestamp, for a user of each
  requirement class, at t = 1 and at the start, middle and end of their window; compared with that
  user's ε_i; 8 users of the class moved over their first window (8 ε_i);
  and where the shared publish decision flips: k users of a large population already moved at t = 2
  (k found by bisection) against k + 1;
- Swellfish (Tex et al.): a policy's pattern, θ added at its timestamps, at every placement inside
  its relevance interval; compared with ε; 8 patterns stacked at the start of J (8ε).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs
import numpy as np
from numpy.typing import NDArray
from scipy.stats import beta

from budgetcheck.ledger.access import LedgerAccess
from budgetcheck.ledger.intrusions import ANNOUNCED, SINGLE
from budgetcheck.ledger.noise import NUMPY
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.mechanism.execute import (
    PersonalizedMechanism,
    StreamMechanism,
    SwellfishMechanism,
    execute,
    execute_on,
    execute_personalized,
    execute_swellfish,
)
from budgetcheck.stream.guarded import GuardedStream
from budgetcheck.stream.neighbours import DEFAULT, Neighbours
from budgetcheck.verify.owner import ledger_flags

FloatArray = NDArray[np.float64]
Run = Callable[[FloatArray, int], FloatArray]  # (input, seed) -> releases (runs, T, d)

_QUANTILES = (0.5, 0.9, 0.99)
_GROUP = 8  # individuals (users, patterns) in a group pair: a loss k times one individual's, held to k ε
_BASE_LEVEL = 50.0


@attrs.frozen
class NeighbourPair:
    """Two inputs that the privacy notion protects with ``epsilon``; ``column`` is the release
    column the statistics read; they differ at ``changed`` (0-based timestamps)."""

    name: str
    first: FloatArray
    second: FloatArray
    changed: tuple[int, ...]
    direction: float
    column: int
    epsilon: float
    run: Run | None = attrs.field(default=None, eq=False, repr=False, kw_only=True)  # None: the audit's own


@attrs.frozen
class StatFinding:
    """The largest lower bound found (relative to the ε of its pair) and where."""

    epsilon: float
    w: int
    lower_bound: float
    position: str
    threshold: float
    runs: int
    regime: str = ""  # the regime of the audit that found it (budgetcheck.verify.regimes), if several ran

    @property
    def violates(self) -> bool:
        return self.lower_bound > self.epsilon


def _clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    low = 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - alpha, successes + 1, trials - successes))
    return low, high


def _statistics(releases: FloatArray, pair: NeighbourPair) -> list[FloatArray]:
    """Per run: the signed sum over the changed timestamps; whether the release moved at the first
    changed timestamp; and the signed sum where it moved, −∞ where it did not (the event "published
    and large" adds a decision's loss to its release's)."""
    signed = pair.direction * releases[:, list(pair.changed), pair.column].sum(axis=1)
    moved = _moved(releases, pair.changed[0])
    return [signed, moved.astype(np.float64), np.where(moved, signed, -np.inf)]


def _linear_weights(first: FloatArray, second: FloatArray) -> FloatArray | None:
    """Weights over every (timestamp, column) of a run: the difference of the mean releases of the
    two inputs (first half of the runs), zero where it is within 3 standard errors of 0. None if no
    entry differs."""
    a, b = first.reshape(first.shape[0], -1), second.reshape(second.shape[0], -1)
    difference = b.mean(axis=0) - a.mean(axis=0)
    error = np.sqrt((a.var(axis=0) + b.var(axis=0)) / a.shape[0])
    weights = np.where(np.abs(difference) > 3.0 * error, difference, 0.0)
    return weights if np.any(weights) else None


def _project(releases: FloatArray, weights: FloatArray) -> FloatArray:
    return np.asarray(releases.reshape(releases.shape[0], -1) @ weights, dtype=np.float64)


_EVENTS_PER_PAIR = (3 * len(_QUANTILES) + 1) * 2  # signed, joint, linear: each quantile; moved: >= 1; both orders


def _thresholds(index: int, pilot: FloatArray) -> list[float]:
    """The event thresholds of statistic ``index``, chosen on the first half of the runs."""
    if index == 1:
        return [1.0]
    finite = pilot[np.isfinite(pilot)]
    return [float(np.quantile(finite, q)) for q in _QUANTILES] if finite.size else []


def _pair_bound(run: Run, pair: NeighbourPair, *, runs: int, seed: int, alpha: float, w: int) -> StatFinding:
    """The best confident lower bound on ln P[event | first] / P[event | second] (either order).

    Each event's bound rests on two one-sided Clopper-Pearson bounds, each at level ``alpha / 2``
    (a union bound: both hold with probability at least 1 − ``alpha``)."""
    releases_a, releases_b = run(pair.first, seed), run(pair.second, seed + 1)
    half = runs // 2
    first, second = _statistics(releases_a, pair), _statistics(releases_b, pair)
    weights = _linear_weights(releases_a[:half], releases_b[:half])
    if weights is not None:
        first.append(_project(releases_a, weights))
        second.append(_project(releases_b, weights))
    best = StatFinding(epsilon=pair.epsilon, w=w, lower_bound=0.0, position=pair.name, threshold=0.0, runs=runs)
    for index, (stat_a, stat_b) in enumerate(zip(first, second, strict=True)):
        for threshold in _thresholds(index, stat_b[:half]):
            for upper, lower in ((stat_b[half:], stat_a[half:]), (stat_a[half:], stat_b[half:])):
                p_low, _ = _clopper_pearson(int(np.sum(upper >= threshold)), upper.size, alpha / 2)
                _, p_high = _clopper_pearson(int(np.sum(lower >= threshold)), lower.size, alpha / 2)
                if p_low > 0 and p_high > 0 and math.log(p_low / p_high) > best.lower_bound:
                    where = pair.name + (" (linear event over every column and timestamp)" if index == 3 else "")
                    best = attrs.evolve(best, lower_bound=math.log(p_low / p_high), threshold=threshold, position=where)
    return best


def _audit(run: Run, pairs: Sequence[NeighbourPair], *, runs: int, alpha: float, seed: int, w: int) -> StatFinding:
    """The pair whose bound is largest relative to its ε (Bonferroni over every pair and event)."""
    corrected = alpha / (len(pairs) * _EVENTS_PER_PAIR)
    cached: dict[int, Run] = {}  # one cache per execution (the audit's own, an intruder's, a population's)

    def runner(pair: NeighbourPair) -> Run:
        own = run if pair.run is None else pair.run
        return cached.setdefault(id(own), _once_per_input(own))

    findings = [
        _pair_bound(runner(pair), pair, runs=runs, seed=seed + 2 * i, alpha=corrected, w=w)
        for i, pair in enumerate(pairs)
    ]
    return max(findings, key=lambda f: f.lower_bound / f.epsilon)


def _once_per_input(run: Run) -> Run:
    """``run`` that executes each distinct input once, with the seed of its first use: most pairs
    share their first input. Sound: each pair's two samples stay independent (distinct inputs,
    distinct seeds), and the Bonferroni correction needs no independence between pairs."""
    seen: dict[tuple[tuple[int, ...], bytes], FloatArray] = {}

    def cached(data: FloatArray, run_seed: int) -> FloatArray:
        key = (data.shape, np.ascontiguousarray(data, dtype=np.float64).tobytes())
        if key not in seen:
            seen[key] = run(data, run_seed)
        return seen[key]

    return cached


def _moved(releases: FloatArray, position: int) -> NDArray[np.bool_]:
    """Per run: did the release at ``position`` differ from the one before (all zeros before t = 1)?"""
    previous = releases[:, position - 1] if position > 0 else np.zeros_like(releases[:, 0])
    return np.asarray(np.any(releases[:, position] != previous, axis=1))


def _half_crossing(rate: Callable[[int], float], top: int) -> int | None:
    """The k in [0, top) with rate(k) < 1/2 <= rate(k + 1), found by bisection on integers (rate is
    taken to grow with k); None when rate(0) < 1/2 <= rate(top) does not hold (no crossing)."""
    low, high = 0, top
    if not rate(low) < 0.5 <= rate(high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if rate(middle) < 0.5 else (low, middle)
    return low


def decision_flip(run: Run, base: FloatArray, position: int, *, seed: int, top: int = 1 << 12) -> int | None:
    """The spike height h at ``position`` where the share of runs that publish there crosses 1/2:
    h publishes in fewer than half the runs, h + 1 in at least half (bisection on integers).
    None when the share does not cross 1/2 between 0 and ``top`` (no data-dependent decision)."""

    def rate(height: int) -> float:
        data = base.copy()
        data[position] += height
        return float(np.mean(_moved(run(data, seed), position)))

    return _half_crossing(rate, top)


def statistical_audit(
    mechanism: StreamMechanism,
    *,
    epsilon: float = 1.0,
    w: int = 3,
    runs: int = 4000,
    alpha: float = 0.05,
    seed: int = 0,
    pilot_runs: int = 400,
    dimensions: int = 2,
    neighbours: Neighbours = DEFAULT,
    whole_window: bool = False,
    lean: bool = False,
) -> StatFinding:
    """w-event: the largest confident lower bound on the loss over the neighbour pairs and events.

    The streams have ``dimensions`` bins and carry ``neighbours``, the relation the ledger derives
    every sensitivity from, and the pairs are neighbours under it (see :func:`relation_pairs`).
    ``whole_window``: also one individual changed at every timestamp of the first window, held to ε
    (w-neighbouring streams, Kellaris et al. 2014, Def. 3: the pair that resolves a sensitivity
    wrong by a small factor, whose loss adds up over the window). ``lean``: streams of 2w, pairs at
    the first timestamp and over the first window only, no decision flips (the audit of a vouched
    sensitivity in its further regimes: a fork per measured timestamp makes every input costly)."""
    length = 2 * w if lean else 3 * w
    base = np.full((length, dimensions), _BASE_LEVEL)

    def run(data: FloatArray, run_seed: int) -> FloatArray:
        stream = GuardedStream(data, neighbours=neighbours)
        return execute(mechanism, stream, epsilon=epsilon, w=w, runs=runs, seed=run_seed, **ledger_flags()).releases

    def pilot(data: FloatArray, run_seed: int) -> FloatArray:
        stream = GuardedStream(data, neighbours=neighbours)
        return execute(
            mechanism, stream, epsilon=epsilon, w=w, runs=pilot_runs, seed=run_seed, **ledger_flags()
        ).releases

    pairs = relation_pairs(base, w=w, epsilon=epsilon, neighbours=neighbours, whole_window=whole_window, lean=lean)
    # decision flips: at t = 1 of a zero stream (the mechanism's state is known there) and in the
    # middle of a window of the constant stream; one individual adds k to the spike (one bin, or
    # across bins: all k in one is allowed); a move between bins (replace-one) has no spike to grow
    step = float(neighbours.bound)
    for where, level, position in (("at t=1", 0.0, 0), ("mid-window", _BASE_LEVEL, w + w // 2)):
        if neighbours.kind == "replace-one" or lean:
            break
        flat = np.full((length, 1), level)  # d = 1: a mean dissimilarity over d bins would dilute the flip
        height = decision_flip(pilot, flat, position, seed=seed + 10_000)
        if height is None:
            continue
        for low in range(max(0, height - 1), height + 2):  # the crossing may sit on a grid point
            spike = flat.copy()
            spike[position] += low  # the height decision_flip found, then one individual more in bin 0
            higher = spike.copy()
            higher[position, 0] += step
            pairs.append(
                NeighbourPair(
                    f"decision flip {where} (spike {low} vs {low + step:g})",
                    spike,
                    higher,
                    (position,),
                    1.0,
                    0,
                    epsilon,
                )
            )
    if getattr(mechanism, "intrusions", None) in (SINGLE, ANNOUNCED):
        pairs += intruder_pairs(mechanism, base, epsilon=epsilon, w=w, runs=runs, neighbours=neighbours)
    return _audit(run, pairs, runs=runs, alpha=alpha, seed=seed, w=w)


def relation_pairs(
    base: FloatArray,
    *,
    w: int,
    epsilon: float,
    neighbours: Neighbours = DEFAULT,
    whole_window: bool = False,
    lean: bool = False,
) -> list[NeighbourPair]:
    """The w-event pairs on ``base`` (T = 3w, d bins) that are neighbours under ``neighbours``: one
    individual changed at t = 1 (where every built-in publishes) and at the start, middle and end of
    a window, held to ε; two such changes (a person moved from bin 0 to bin 1 under an add/remove
    relation) held to 2ε; a group of 8 over the first window held to 8ε.

    Per relation (Kellaris et al. 2014, Def. 2; :mod:`budgetcheck.stream.neighbours`): one-bin(k)
    adds or removes k in bin 0; across-bins(k) also spreads k over the bins; replace-one moves a
    person from bin 0 to bin 1 (one neighbour step, held to ε). ``whole_window`` and ``lean``: see
    :func:`statistical_audit`."""
    length, d = base.shape
    k = float(neighbours.bound)
    pairs: list[NeighbourPair] = []
    places = {
        0: "first timestamp",
        w: "start of a window",
        w + w // 2: "middle of a window",
        2 * w - 1: "end of a window",
    }
    if lean:
        places = {0: "first timestamp"}
    replace = neighbours.kind == "replace-one"
    for position, name in places.items():  # one pair per distinct position (w = 1: start = middle = end)
        if not replace:
            for direction in (1.0, -1.0):
                neighbour = base.copy()
                neighbour[position, 0] += direction * k
                what = "added to" if direction > 0 else "removed from"
                pairs.append(
                    NeighbourPair(
                        f"{name}, one individual {what} bin 0" + (f" (contributing {k:g})" if k != 1 else ""),
                        base,
                        neighbour,
                        (position,),
                        direction,
                        0,
                        epsilon,
                    )
                )
        if neighbours.kind == "across-bins" and d > 1:
            spread = base.copy()
            spread[position] += _spread(int(k), d)
            pairs.append(
                NeighbourPair(
                    f"{name}, one individual adding {k:g} across bins", base, spread, (position,), 1.0, 0, epsilon
                )
            )
        if d > 1:
            moved = base.copy()
            moved[position, :2] += (-1.0, 1.0)  # replace-one: one step; add/remove: two, group privacy gives 2ε
            pairs.append(
                NeighbourPair(
                    f"{name}, one individual moved from bin 0 to bin 1",
                    base,
                    moved,
                    (position,),
                    1.0,
                    1,
                    epsilon if replace else 2 * epsilon,
                )
            )
    if whole_window:  # one individual at every timestamp of the first window: w-neighbours, held to ε
        window = base.copy()
        if replace:
            window[:w, :2] += (-1.0, 1.0)
        else:
            window[:w, 0] += k
        change = "moved from bin 0 to bin 1" if replace else "added to bin 0"
        pairs.append(
            NeighbourPair(
                f"first window, one individual {change} at each of its {w} timestamps",
                base,
                window,
                tuple(range(w)),
                1.0,
                1 if replace else 0,
                epsilon,
            )
        )
    group = base.copy()  # k individuals over the first window, where every built-in publishes
    if replace:
        group[:w, :2] += (-float(_GROUP), float(_GROUP))
        column, what = 1, f"a group of {_GROUP} individuals moved from bin 0 to bin 1"
    else:
        group[:w, 0] += _GROUP * k
        column, what = 0, f"a group of {_GROUP} individuals added to bin 0"
    pairs.append(
        NeighbourPair(
            f"first window, {what} (group privacy: {_GROUP} epsilon)",
            base,
            group,
            tuple(range(w)),
            1.0,
            column,
            _GROUP * epsilon,
        )
    )
    return pairs


def _spread(k: int, d: int) -> FloatArray:
    """k spread over the d bins as evenly as integers allow (one individual under across-bins(k))."""
    return np.asarray(np.bincount(np.arange(k) % d, minlength=d), dtype=np.float64)


def intruder_pairs(
    mechanism: StreamMechanism,
    base: FloatArray,
    *,
    epsilon: float,
    w: int,
    runs: int,
    neighbours: Neighbours = DEFAULT,
) -> list[NeighbourPair]:
    """Pan-privacy under a single unannounced intrusion (Kellaris et al. 2014, §4.5; Dwork et al.
    2010): pairs whose observation is the releases *and* what an intrusion at one timestamp τ reads,
    the values the ledger holds at τ (``held_laplace``: c_τ with its noise, published or discarded),
    appended to the releases as one more row (several holds at τ summed, nothing held: 0; a function
    of what the intruder reads, so every event stays one of the observation). The ledger keeps
    Σ_window ε_t + the window's largest exposure <= ε, which bounds the loss of this observation by
    ε: the pairs are held to ε, and a group of 8 to 8ε. τ is the middle of a window of the constant
    stream, where BD and BA skip, so the held value is an exposure the releases alone do not show.

    Under multiple announced intrusions (``intrusions == "announced"``) there is nothing unannounced
    to read: the intrusion at τ is announced, the ledger forces the held value's publication, and the
    observation is the releases (with that forced publication) plus the same row, now a release."""
    position = w + w // 2
    length = base.shape[0]
    announced = getattr(mechanism, "intrusions", None) == ANNOUNCED

    def run(data: FloatArray, run_seed: int) -> FloatArray:
        params = WEventParams(epsilon=epsilon, w=w)  # execute's ledger: the same noise for the same seed
        ledger = WindowLedger(params, runs=runs, seed=run_seed, sampler=NUMPY, keep_records=True, **ledger_flags())
        access = LedgerAccess(ledger)
        access.intrude(position + 1)
        if announced:
            ledger.announce_intrusion(position + 1)
        releases = execute_on(mechanism, GuardedStream(data, neighbours=neighbours), ledger).releases
        row = np.zeros((releases.shape[0], 1, releases.shape[2]))
        for held in access.intruder_read():
            if held.shape == row[:, 0].shape:
                row[:, 0] += np.where(np.isfinite(held), held, 0.0)
        return np.concatenate([releases, row], axis=1)

    pairs = []
    for count, bound in ((1, epsilon), (_GROUP, _GROUP * epsilon)):
        neighbour = base.copy()
        if neighbours.kind == "replace-one":  # count individuals moved from bin 0 to bin 1
            neighbour[position, :2] += (-float(count), float(count))
        else:
            neighbour[position, 0] += count * neighbours.bound
        who = "one individual" if count == 1 else f"a group of {count} individuals (group privacy: {count} epsilon)"
        what = "an announced intrusion there" if announced else "an intrusion reading the held value there"
        change = "moved from bin 0 to bin 1" if neighbours.kind == "replace-one" else "added to bin 0"
        pairs.append(
            NeighbourPair(
                f"middle of a window, {who} {change}, {what}",
                base,
                neighbour,
                (position, length),
                1.0,
                0,
                bound,
                run=run,
            )
        )
    return pairs


def personalized_audit(
    mechanism: PersonalizedMechanism, *, runs: int = 4000, alpha: float = 0.05, seed: int = 0, pilot_runs: int = 400
) -> StatFinding:
    """Personalized: one user of each class moves from bin 0 to bin 1 at one timestamp; and at t = 2,
    where the shared publish decision flips, k users of a class already moved against k + 1."""
    requirements = RequirementSet([(2, 0.5)] * _CLASS_SIZE + [(3, 1.0)] * _CLASS_SIZE)
    length = 9
    base = np.zeros((length, requirements.n_users))

    def runner(count: int) -> Run:
        def run(bins: FloatArray, run_seed: int) -> FloatArray:
            return execute_personalized(
                mechanism,
                requirements,
                bins.astype(np.int64),
                dimensions=2,
                runs=count,
                seed=run_seed,
                **ledger_flags(),
            ).releases

        return run

    pairs = []
    for user in (0, requirements.n_users - 1):
        requirement = requirements.classes[int(requirements.user_classes[user])]
        w = requirement.w
        for position, name in {0: "first timestamp", w: "start", w + w // 2: "middle", 2 * w - 1: "end"}.items():
            moved = base.copy()
            moved[position, user] = 1
            pairs.append(
                NeighbourPair(
                    f"user {user} (w={requirement.w}, epsilon={requirement.epsilon}) at the {name}",
                    base,
                    moved,
                    (position,),
                    1.0,
                    1,
                    requirement.epsilon,
                )
            )
        members = np.flatnonzero(requirements.user_classes == requirements.user_classes[user])[:_GROUP]
        group = base.copy()  # k users of the class moved over their first window (t = 1 always publishes)
        group[:w, members] = 1
        pairs.append(
            NeighbourPair(
                f"a group of {members.size} users (w={w}, epsilon={requirement.epsilon}) moved over "
                f"their first window (group privacy: {members.size} epsilon)",
                base,
                group,
                tuple(range(w)),
                1.0,
                1,
                members.size * requirement.epsilon,
            )
        )
    for user in (0, requirements.n_users - 1):  # the flip, among the users of each class
        requirement = requirements.classes[int(requirements.user_classes[user])]
        members = np.flatnonzero(requirements.user_classes == requirements.user_classes[user])
        count = _users_flip(runner(pilot_runs), base, members, seed=seed + 10_000)
        if count is None:
            continue
        for k in range(max(0, count - 1), min(count + 1, members.size - 1) + 1):
            before = base.copy()
            before[1, members[:k]] = 1
            after = before.copy()
            after[1, members[k]] = 1
            pairs.append(
                NeighbourPair(
                    f"decision flip at t=2 ({k} vs {k + 1} users of (w={requirement.w}, "
                    f"epsilon={requirement.epsilon}) in bin 1)",
                    before,
                    after,
                    (1,),
                    1.0,
                    1,
                    requirement.epsilon,
                )
            )
    pairs.append(population_pair(mechanism, requirements, runs=runs))
    return _audit(runner(runs), pairs, runs=runs, alpha=alpha, seed=seed, w=max(r.w for r in requirements.classes))


_CLASS_SIZE = 24  # users per requirement class: enough for the shared decision to flip inside one class
_POPULATION = 512  # users per class in the population pair: a local randomiser's aggregate resolves them all


def population_pair(mechanism: PersonalizedMechanism, requirements: RequirementSet, *, runs: int) -> NeighbourPair:
    """Every user of a large population (``requirements``' classes with ``_POPULATION`` users each)
    moved from bin 0 to bin 1 over the first window of the longest class (t = 1 always publishes), held
    to Σ ε_i over the users (group privacy: a chain of one-user neighbours, each user's loss at most
    their ε_i).

    Why a population. Under a local randomiser (LDP-IDS's LBD and LBA, Ren et al. 2022) each user
    reports through GRR or OUE at its own budget and only the aggregate is released: at t = 1 LBD's
    publication report is ε/4 = 0.125 per user for the strictest requirement (w = 3, ε = 0.5), and
    GRR's unbiased count then has a standard deviation of about 11 √n over n users (Wang et al. 2017,
    Eq. 2; ``estimate_variance``), while moving k users shifts it by k. A group of 8 among 48 users
    moves it by 0.1 of a standard deviation, which 4,000 runs cannot resolve; moving all n users moves
    it by about √n/11 standard deviations, 2.9 for n = 1,024, and the window's reports add up. The bound
    stays a lower bound: it is compared with the Σ ε_i that protects the group, never with one ε_i."""
    population = RequirementSet([(r.w, r.epsilon) for r in requirements.classes for _ in range(_POPULATION)])
    w = max(r.w for r in population.classes)
    length = 3 * w

    def run(bins: FloatArray, run_seed: int) -> FloatArray:
        return execute_personalized(
            mechanism, population, bins.astype(np.int64), dimensions=2, runs=runs, seed=run_seed, **ledger_flags()
        ).releases

    base = np.zeros((length, population.n_users))
    moved = base.copy()
    moved[:w] = 1
    total = float(sum(population.classes[int(c)].epsilon for c in population.user_classes))
    return NeighbourPair(
        f"all {population.n_users} users of a population ({_POPULATION} per class) moved over the first "
        f"window (group privacy: the sum of their epsilon_i, {total:g})",
        base,
        moved,
        tuple(range(w)),
        1.0,
        1,
        total,
        run=run,
    )


def _users_flip(run: Run, base: FloatArray, members: NDArray[np.int64], *, seed: int) -> int | None:
    """k such that with the first k of ``members`` in bin 1 at t = 2 (t = 1 always publishes) fewer
    than half the runs publish there and with k + 1 at least half; None if the share does not cross 1/2 (bisection)."""

    def rate(k: int) -> float:
        bins = base.copy()
        bins[1, members[:k]] = 1
        return float(np.mean(_moved(run(bins, seed), 1)))

    return _half_crossing(rate, int(members.size))


def swellfish_audit(
    mechanism: SwellfishMechanism, *, epsilon: float = 1.0, runs: int = 4000, alpha: float = 0.05, seed: int = 0
) -> StatFinding:
    """Swellfish: a pattern of the policy (θ at each of its timestamps) placed inside J."""
    policy = StreamPolicy(4, 8, (2.0, 1.0))
    policies = PolicyCollection([policy, StreamPolicy(2, 3, (1.0,))])
    length = 10
    base = np.full((length, 1), _BASE_LEVEL)

    def run(data: FloatArray, run_seed: int) -> FloatArray:
        return execute_swellfish(
            mechanism, policies, data, epsilon=epsilon, runs=runs, seed=run_seed, **ledger_flags()
        ).releases

    pairs = []
    for start in range(policy.start, policy.end - len(policy.thresholds) + 2):  # every placement inside J
        changed = tuple(start - 1 + k for k in range(len(policy.thresholds)))
        for direction in (1.0, -1.0):
            pattern = base.copy()
            pattern[list(changed), 0] += direction * np.array(policy.thresholds)
            pairs.append(
                NeighbourPair(
                    f"pattern at t={start} of J=[{policy.start}, {policy.end}]",
                    base,
                    pattern,
                    changed,
                    direction,
                    0,
                    epsilon,
                )
            )
    changed = tuple(policy.start - 1 + k for k in range(len(policy.thresholds)))
    group = base.copy()  # k patterns stacked at the start of J (a chain of k neighbours: group privacy)
    group[list(changed), 0] += _GROUP * np.array(policy.thresholds)
    pairs.append(
        NeighbourPair(
            f"{_GROUP} patterns stacked at t={policy.start} of J=[{policy.start}, {policy.end}] "
            f"(group privacy: {_GROUP} epsilon)",
            base,
            group,
            changed,
            1.0,
            0,
            _GROUP * epsilon,
        )
    )
    return _audit(run, pairs, runs=runs, alpha=alpha, seed=seed, w=policy.length)
