"""Hypothesis strategies: streams, privacy parameters, requirement sets, policy collections, whole cases.

Streams come in the shapes that break allocation rules: seasonal (Schäler et al. 2022,
Algorithm 2 style), sparse, constant, isolated spikes, and adversarial jumps that flip every
data-dependent decision; d ranges from 1 to 64.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from budgetcheck import libm
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.ledger.requirements import RequirementSet

FloatArray = NDArray[np.float64]

EPSILONS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 1 / 3, 0.1 + 0.2, 2.0**-10, 7.0)


@attrs.frozen
class VerificationCase:
    """One generated input: a stream (T, d), the privacy parameters, runs and seed."""

    kind: str
    data: FloatArray = attrs.field(eq=False, repr=False)
    epsilon: float
    w: int
    runs: int
    seed: int
    intrusions: tuple[int, ...] = ()  # timestamps announced as intruded (Kellaris et al. 2014, §4.5)


def _seasonal(length: int, d: int, amplitude: float, period: int, phase: int) -> FloatArray:
    t = np.arange(length)[:, None] + phase + np.arange(d)[None, :]
    cycle = np.mod(t, period) / period
    return np.asarray(amplitude * (1 - libm.cos(2 * np.pi * cycle)) / 2, dtype=np.float64)


@st.composite
def streams(draw: st.DrawFn, *, max_length: int = 60, max_dimensions: int = 64) -> tuple[str, FloatArray]:
    """A (kind, data) pair with data of shape (T, d), finite and non-negative."""
    length = draw(st.integers(1, max_length))
    d = draw(st.one_of(st.integers(1, 4), st.integers(1, max_dimensions)))
    kind = draw(st.sampled_from(["seasonal", "sparse", "constant", "spikes", "jumps"]))
    if kind == "seasonal":
        amplitude = draw(st.sampled_from([10.0, 100.0, 1000.0, 10000.0]))
        period = draw(st.integers(2, 40))
        data = _seasonal(length, d, amplitude, period, draw(st.integers(0, 39)))
    elif kind == "constant":
        data = np.full((length, d), draw(st.sampled_from([0.0, 1.0, 50.0, 1e6])))
    else:
        mask_bits = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        mask = np.array(mask_bits, dtype=bool)[:, None]
        high = draw(st.sampled_from([1.0, 100.0, 1e4, 1e9]))
        if kind == "sparse":
            data = np.where(mask & (np.arange(d)[None, :] % 3 == 0), high, 0.0)
        elif kind == "spikes":
            data = np.where(mask, high, 1.0) * np.ones((1, d))
        else:  # jumps: alternate far-apart levels so every dissimilarity test fires
            levels = np.cumsum(np.where(mask[:, 0], high, -high))
            data = np.abs(levels)[:, None] * np.ones((1, d))
    return kind, np.asarray(data, dtype=np.float64)


def privacy_parameters(*, max_w: int = 40) -> st.SearchStrategy[WEventParams]:
    """Valid (ε, w): ε from the ulp-unfriendly values and a float range, w from 1 to max_w."""
    epsilon = st.one_of(st.sampled_from(EPSILONS), st.floats(1e-3, 10.0))
    w = st.one_of(st.integers(1, 4), st.integers(1, max_w))
    return st.builds(WEventParams, epsilon=epsilon, w=w)


@st.composite
def cases(
    draw: st.DrawFn, *, max_length: int = 60, max_w: int = 40, max_runs: int = 4, announced: bool = False
) -> VerificationCase:
    """A whole verification input: stream, ε (ulp-unfriendly values included), w, runs, seed; with
    ``announced``, a schedule of announced intrusions too (:func:`intrusion_schedules`)."""
    kind, data = draw(streams(max_length=max_length))
    params = draw(privacy_parameters(max_w=max_w))
    runs = draw(st.integers(1, max_runs))
    seed = draw(st.integers(0, 2**32 - 1))
    intrusions = draw(intrusion_schedules(data.shape[0])) if announced else ()
    return VerificationCase(
        kind=kind, data=data, epsilon=params.epsilon, w=params.w, runs=runs, seed=seed, intrusions=intrusions
    )


@st.composite
def intrusion_schedules(draw: st.DrawFn, length: int) -> tuple[int, ...]:
    """Timestamps in 1..length announced as intruded (multiple announced intrusions, Kellaris et al.
    2014, §4.5): one draw per timestamp, each one an intrusion with some probability, so every
    subset can be drawn (a parity, a residue, isolated or back-to-back ones) and shrinking removes
    intrusions one at a time, towards none."""
    tenths = draw(st.sampled_from([1, 3, 5, 8]))  # the chance of an intrusion at each t, in tenths
    intruded = st.integers(0, 9).map(lambda u: u >= 10 - tenths)  # shrinks towards 0: no intrusion
    return tuple(t for t in range(1, length + 1) if draw(intruded))


@st.composite
def requirement_sets(draw: st.DrawFn, *, max_classes: int = 4, max_users: int = 40, max_w: int = 12) -> RequirementSet:
    """Personalized requirements: 1..max_classes distinct (w, ε) classes with 1..max_users users each."""
    pairs = draw(
        st.lists(
            st.tuples(st.integers(1, max_w), st.sampled_from(EPSILONS)), min_size=1, max_size=max_classes, unique=True
        )
    )
    counts = draw(st.lists(st.integers(1, max_users), min_size=len(pairs), max_size=len(pairs)))
    return RequirementSet.from_counts(list(zip(pairs, counts, strict=True)))


@st.composite
def policy_collections(draw: st.DrawFn, *, horizon: int = 24, max_policies: int = 5) -> PolicyCollection:
    """Swellfish collections: overlapping intervals, patterns as long as their interval, gaps with no policy."""
    policies = []
    for _ in range(draw(st.integers(1, max_policies))):
        start = draw(st.integers(1, horizon))
        end = draw(st.integers(start, min(horizon, start + draw(st.sampled_from([0, 2, 5, 11, 23])))))
        length = draw(st.integers(1, end - start + 1))
        thresholds = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.2, 7.5]), min_size=length, max_size=length))
        policies.append(StreamPolicy(start, end, thresholds))
    return PolicyCollection(policies)


@attrs.frozen
class PersonalizedCase:
    """A personalized verification input: requirements, per-user bins (T, n), d, runs, seed."""

    requirements: RequirementSet = attrs.field(eq=False)
    bins: NDArray[np.int64] = attrs.field(eq=False, repr=False)
    dimensions: int
    runs: int
    seed: int


@attrs.frozen
class SwellfishCase:
    """A Swellfish verification input: policies, stream (T, d), ε, runs, seed."""

    policies: PolicyCollection = attrs.field(eq=False)
    data: FloatArray = attrs.field(eq=False, repr=False)
    epsilon: float
    runs: int
    seed: int


@st.composite
def personalized_cases(draw: st.DrawFn, *, max_length: int = 30, max_runs: int = 3) -> PersonalizedCase:
    """Requirement sets with streams that stay put, drift, or jump (every user moves at once)."""
    requirements = draw(requirement_sets())
    length = draw(st.integers(1, max_length))
    d = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["constant", "random", "jumps"]))
    n = requirements.n_users
    if kind == "constant":
        bins = np.tile(rng.integers(-1, d, size=n), (length, 1))
    elif kind == "random":
        bins = rng.integers(-1, d, size=(length, n))
    else:
        bins = np.repeat(rng.integers(0, d, size=(length, 1)), n, axis=1)
    return PersonalizedCase(
        requirements=requirements,
        bins=bins,
        dimensions=d,
        runs=draw(st.integers(1, max_runs)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def swellfish_cases(draw: st.DrawFn, *, max_runs: int = 3) -> SwellfishCase:
    """A policy collection, a stream running a little past its horizon, ε, runs and seed."""
    policies = draw(policy_collections())
    _, data = draw(streams(max_length=policies.horizon + 4, max_dimensions=4))
    epsilon = draw(st.one_of(st.sampled_from(EPSILONS), st.floats(1e-3, 10.0)))
    return SwellfishCase(
        policies=policies,
        data=data,
        epsilon=epsilon,
        runs=draw(st.integers(1, max_runs)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


# -- pairs of streams for the non-interference check (verify stage (b)) -------------------------------

COUNT_LEVELS = (0, 1, 3, 50, 1000, 10**6, 10**6 + 1, 10**9)


@attrs.frozen
class StreamPair:
    """Two inputs of one shape for the non-interference check, with the ledger parameters that read them.

    ``notion`` says which fields matter: w-event (``epsilon``, ``w``), personalized (``requirements``,
    ``dimensions``; the streams are per-user bins) or Swellfish (``policies``, ``epsilon``)."""

    notion: Notion
    first: NDArray[Any] = attrs.field(eq=False, repr=False)
    second: NDArray[Any] = attrs.field(eq=False, repr=False)
    epsilon: float = 1.0
    w: int = 1
    requirements: RequirementSet | None = attrs.field(default=None, eq=False)
    policies: PolicyCollection | None = attrs.field(default=None, eq=False)
    dimensions: int = 1


def _counts(draw: st.DrawFn, length: int, d: int) -> FloatArray:
    """A count stream (T, d) of one shape the mechanisms meet: counts from 0 to 10^9 (each level that
    flips a comparison: 0, 1, 10^6 and one above it), spikes on a constant, long runs of one value, or
    every entry free (Hypothesis fills most of an array with one value: runs and repeats come for free)."""
    from hypothesis.extra.numpy import arrays

    level = st.one_of(st.sampled_from(COUNT_LEVELS), st.integers(0, 10**9))
    kind = draw(st.sampled_from(["free", "constant", "spikes", "runs"]))
    if kind == "free":  # at most 4 free columns, repeated across d (a 40 x 64 array of free draws overruns Hypothesis)
        free = np.asarray(draw(arrays(np.int64, (length, min(d, 4)), elements=level)), dtype=np.float64)
        return np.asarray(free[:, np.arange(d) % free.shape[1]], dtype=np.float64)
    data = np.full((length, d), float(draw(level)))
    if kind == "spikes":
        for t in draw(st.lists(st.integers(0, length - 1), max_size=3)):
            data[t] = float(draw(level))
    elif kind == "runs":
        t = 0
        while t < length:
            run = draw(st.integers(1, max(1, length - t)))
            data[t : t + run] = float(draw(level))
            t += run
    return data


def _dimensions(max_dimensions: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 4), st.integers(1, max_dimensions))


@st.composite
def stream_pairs(draw: st.DrawFn, notion: str, *, max_length: int = 40, max_dimensions: int = 64) -> StreamPair:
    """Two streams of one shape (and the ledger that reads them) for ``notion``: counts from 0 to 10^9,
    spikes, zeros, constants, long runs, d from 1 to 64; per-user bins for personalized; policy
    collections for Swellfish. The second stream is drawn independently, so Hypothesis shrinks either
    towards zeros and one value."""
    if notion == Notion.PERSONALIZED:
        from hypothesis.extra.numpy import arrays

        requirements = draw(requirement_sets(max_classes=3, max_users=6, max_w=6))
        d = draw(st.integers(1, 4))
        length = draw(st.integers(1, max_length // 2))
        bins = arrays(np.int64, (length, requirements.n_users), elements=st.integers(-1, d - 1))
        return StreamPair(Notion.PERSONALIZED, draw(bins), draw(bins), requirements=requirements, dimensions=d)
    epsilon = draw(st.sampled_from((0.5, 1.0, 2.0, 1 / 3)))
    if notion == Notion.SWELLFISH:
        policies = draw(policy_collections(horizon=12, max_policies=3))
        length = policies.horizon + draw(st.integers(0, 4))
        d = draw(_dimensions(8))
        return StreamPair(
            Notion.SWELLFISH,
            _counts(draw, length, d),
            _counts(draw, length, d),
            epsilon=epsilon,
            policies=policies,
            dimensions=d,
        )
    length = draw(st.integers(1, max_length))
    d = draw(_dimensions(max_dimensions))
    return StreamPair(
        Notion.W_EVENT,
        _counts(draw, length, d),
        _counts(draw, length, d),
        epsilon=epsilon,
        w=draw(st.integers(1, 12)),
        dimensions=d,
    )
