"""Swellfish stream policies and policy collections (Tex, Schäler, Böhm; Definitions 3.2-3.5, 4.1, Algorithm 1).

A distance-based stream policy (Definition 3.3) hides, at any start j ∈ J^T, whether a pattern of
length T = len(θ) took place, where the k-th event may change the stream by at most θ[k]. The
temporal sensitivity of the sum query at t (Definition 4.1) is the sum over the policies relevant
at t of the largest θ[k] that can land on t; it is 0 where no policy is relevant. δ(J) is the
CalcDeltaJ bound (Algorithm 1, the 'overlap' bound of the public code).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import final

import attrs

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import check_nonnegative, check_positive_int

_DIGITS = re.compile(r"[0-9]{1,19}")


def _thresholds(value: object) -> tuple[float, ...]:
    """θ as doubles, each exactly what was given: a threshold sets the temporal sensitivity, hence the noise,
    so one no double equals (Fraction, a long double, an integer beyond 2^53) is refused as a budget is,
    never rounded (to nearest it may round down: noise below the policy's θ); strings are not parsed."""
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes)):
        raise InvalidArgument(f"thresholds={value!r} must be a sequence of numbers >= 0")
    items = tuple(check_nonnegative(x, f"thresholds[{k}]") for k, x in enumerate(value))
    if not items:
        raise InvalidArgument("thresholds=() is empty: a pattern has length T >= 1")
    return items


def _timestamp(value: object) -> int:
    return check_positive_int(value, "timestamp")


@attrs.frozen
class StreamPolicy:
    """A distance-based stream policy: relevance interval J = [start, end], thresholds θ (T = len θ)."""

    start: int = attrs.field(converter=_timestamp)
    end: int = attrs.field(converter=_timestamp)
    thresholds: tuple[float, ...] = attrs.field(converter=_thresholds)

    def __attrs_post_init__(self) -> None:
        if self.end < self.start:
            raise InvalidArgument(f"policy interval [start={self.start}, end={self.end}] is empty")
        if len(self.thresholds) > self.length:
            raise InvalidArgument(
                f"pattern length T={len(self.thresholds)} is longer than its relevance interval "
                f"[{self.start}, {self.end}] of {self.length} timestamps"
            )

    @property
    def length(self) -> int:
        """|J|."""
        return self.end - self.start + 1

    @property
    def pattern_length(self) -> int:
        """T = |π|."""
        return len(self.thresholds)

    def relevant(self, t: int) -> bool:
        return self.start <= t <= self.end

    def threshold_at(self, t: int) -> float:
        """The largest θ[k] a pattern starting in J^T can put on timestamp t (0 outside J)."""
        if not self.relevant(t):
            return 0.0
        T = self.pattern_length
        low = max(0, t - (self.end - T + 1))
        high = min(T - 1, t - self.start)
        return max(self.thresholds[low : high + 1])

    def overlap(self, other: StreamPolicy) -> int:
        return max(0, min(self.end, other.end) - max(self.start, other.start) + 1)


@final
class PolicyCollection:
    """A non-empty set of stream policies (Definition 3.4) with δ(J) and Δ_Q^t precomputed."""

    __slots__ = ("_deltas", "_policies", "_relevant", "_sensitivity")

    def __init__(self, policies: Sequence[StreamPolicy]) -> None:
        items = tuple(policies) if isinstance(policies, Sequence) and not isinstance(policies, str) else None
        if not items:
            raise InvalidArgument(f"policies={policies!r} must be a non-empty sequence of StreamPolicy")
        for index, policy in enumerate(items):
            if not isinstance(policy, StreamPolicy):
                raise InvalidArgument(f"policies[{index}]={policy!r} is not a StreamPolicy")
        self._policies = items
        horizon = max(p.end for p in items)
        relevant: list[list[int]] = [[] for _ in range(horizon + 1)]
        for i, p in enumerate(items):
            for t in range(p.start, p.end + 1):
                relevant[t].append(i)
        self._relevant = tuple(tuple(r) for r in relevant)
        self._deltas = tuple(calc_delta_j(items, i) for i in range(len(items)))
        self._sensitivity = tuple(
            _exact_sum_up([items[i].threshold_at(t) for i in rel]) for t, rel in enumerate(self._relevant)
        )

    @property
    def policies(self) -> tuple[StreamPolicy, ...]:
        return self._policies

    @property
    def horizon(self) -> int:
        """The last timestamp any policy is relevant at."""
        return len(self._relevant) - 1

    @property
    def max_interval(self) -> int:
        """max |J|: the w of the w-event baseline (Theorem 4.3)."""
        return max(p.length for p in self._policies)

    def relevant(self, t: int) -> tuple[int, ...]:
        """Indices of the policies relevant at t (Φ_t)."""
        return self._relevant[t] if 0 <= t < len(self._relevant) else ()

    def delta(self, index: int) -> int:
        """δ(J) of policy ``index`` (CalcDeltaJ)."""
        return self._deltas[index]

    def temporal_sensitivity(self, t: int) -> float:
        """Δ_Q^t(Φ) of the sum query (Definition 4.1), rounded up; 0 where no policy is relevant."""
        return self._sensitivity[t] if 0 <= t < len(self._sensitivity) else 0.0

    def global_sensitivity(self) -> float:
        """max_t Δ_Q^t: the sensitivity a mechanism that ignores time must use."""
        return max(self._sensitivity)

    def __len__(self) -> int:
        return len(self._policies)

    def __repr__(self) -> str:
        return f"PolicyCollection({len(self._policies)} policies, horizon={self.horizon}, max |J|={self.max_interval})"


# Δ_Q^t and δ(J) are derived once, from policies fixed from then on (issue 43, item 3)
seal(PolicyCollection, "_deltas", "_policies", "_relevant", "_sensitivity")
seal(StreamPolicy, "start", "end", "thresholds")


def _exact_sum_up(values: Sequence[float]) -> float:
    """The exact sum of ``values`` rounded up to a double (so Laplace scales are never too small)."""
    exact = sum((Fraction(v) for v in values), Fraction(0))
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def calc_delta_j(policies: Sequence[StreamPolicy], index: int) -> int:
    """CalcDeltaJ (Algorithm 1) for J of ``policies[index]``: an upper bound on goal-affected timestamps in J.

    For every φ relevant during J: δ_φ = |π_φ| + Σ_{φ' ≠ φ overlapping J} min(|J ∩ J'|, |π_φ'|),
    capped at |J|; δ(J) = max_φ δ_φ.
    """
    owner = policies[index]
    during = [p for p in policies if owner.overlap(p) > 0]
    contributions = [min(owner.overlap(p), p.pattern_length) for p in during]
    total = sum(contributions)
    # δ_φ = |π_φ| + Σ_{φ' ≠ φ} min(|J ∩ J'|, |π_φ'|) = |π_φ| + total − φ's own term: O(|Φ_J|) per interval.
    return max(min(p.pattern_length + total - own, owner.length) for p, own in zip(during, contributions, strict=True))


def placements(policies: Sequence[StreamPolicy], index: int) -> int:
    """How many ways the policies overlapping J of ``policies[index]`` can place their patterns."""
    owner = policies[index]
    return math.prod(p.end - p.pattern_length + 3 - p.start for p in policies if owner.overlap(p) > 0)


def goal_affected_sets(policies: Sequence[StreamPolicy], index: int) -> Iterator[frozenset[int]]:
    """Every set of timestamps in J where two neighbouring streams can differ (exhaustive).

    Every policy overlapping J either takes no part or places its pattern at some start
    j ∈ [start, end − T + 1]; every event of a placed pattern may differ. There are
    :func:`placements` of them: small cases only.
    """
    owner = policies[index]
    during = [p for p in policies if owner.overlap(p) > 0]
    options = [[None, *range(p.start, p.end - p.pattern_length + 2)] for p in during]
    for placement in itertools.product(*options):
        touched: set[int] = set()
        for p, j in zip(during, placement, strict=True):
            if j is not None:
                touched.update(t for t in range(j, j + p.pattern_length) if owner.relevant(t))
        yield frozenset(touched)


def goal_affected_maximum(policies: Sequence[StreamPolicy], index: int) -> int:
    """The exact max number of goal-affected timestamps in J (the quantity δ(J) bounds)."""
    return max(len(s) for s in goal_affected_sets(policies, index))


MAX_FILE_END = 1 << 16  # the latest end of a policy read from a file: a collection is held per timestamp up to it
MAX_FILE_PATTERN = 1 << 24  # the largest |J|·T of a policy read from a file (the cost of its sensitivities)


def _parsed(field: str, k: int) -> float:
    """A threshold read from text: the double the decimal names (as a command line's --epsilon is read)."""
    try:
        return float(field)
    except ValueError:
        raise InvalidArgument(f"thresholds[{k}]={field[:40]!r} must be a number >= 0") from None


def load_policies(lines: Iterable[str], *, source: str = "policies") -> PolicyCollection:
    """``start,end,θ_1[,θ_2,…]`` lines (a policy's relevance interval J = [start, end] and its
    pattern's thresholds) as a :class:`PolicyCollection`; ``#`` comments, blank lines and a
    ``start,end,thresholds`` header are skipped. A collection is computed per timestamp, so a file
    may list intervals ending by t = :data:`MAX_FILE_END` and patterns with |J|·T up to
    :data:`MAX_FILE_PATTERN` (beyond, the precomputation alone would take minutes: refused by line)."""
    policies: list[StreamPolicy] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#") or (number == 1 and text.replace(" ", "").lower().startswith("start,end")):
            continue
        fields = [part.strip() for part in text.split(",")]
        if len(fields) < 3:
            raise InvalidArgument(
                f"{source} line {number}: expected start,end,theta_1[,theta_2,...], got {text[:80]!r}"
            )
        if not all(_DIGITS.fullmatch(field) for field in fields[:2]):
            raise InvalidArgument(
                f"{source} line {number}: start={fields[0][:40]!r} and end={fields[1][:40]!r} must be integers"
            )
        start, end = int(fields[0]), int(fields[1])
        if end > MAX_FILE_END or (end - start + 1) * (len(fields) - 2) > MAX_FILE_PATTERN:
            raise InvalidArgument(
                f"{source} line {number}: policies of a file must end by t={MAX_FILE_END:,} and have "
                f"|J|·T <= {MAX_FILE_PATTERN:,}, got J=[{start}, {end}] with T={len(fields) - 2}"
            )
        try:
            policies.append(StreamPolicy(start, end, [_parsed(field, k) for k, field in enumerate(fields[2:])]))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{source} line {number}: {exc}") from None
    if not policies:
        raise InvalidArgument(f"{source} lists no policies: a Swellfish publisher needs at least one")
    return PolicyCollection(policies)
