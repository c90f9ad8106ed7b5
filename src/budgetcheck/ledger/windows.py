"""Exact sliding-window sums per run (the arithmetic behind every window check), with a float pre-check.

Amounts are exact integers in units of 2**-1127 (:mod:`budgetcheck.rounding`), held per run as
:class:`ExactVector` limbs, so sums are exact.
The structure keeps, per run, the totals of the timestamps inside the current window and the
window sum, updated incrementally: a check costs O(runs) and does not grow with the stream length.

Pre-check (:meth:`ExactWindows.quick_check`): besides the exact sum, every run keeps a pair of
doubles (hi, lo) whose exact sum hi + lo is >= its exact window sum (a double-double, Dekker 1971):
each addition of a spend and subtraction of a leaving spend is error-free (TwoSum, Knuth TAOCP 2
§4.2.2), and only the low word's addition is rounded, upward, so the bound stays within about
2**-100 of the exact sum relative to ε. When that bound with the new amounts is <= ε in every run,
the spend is certainly allowed and is committed without exact arithmetic (:meth:`commit_quick`);
the exact sum is then brought up to date only when something asks for it (a spend within 2**-100 of
ε, ``remaining``, a footprint). Decisions are the exact ones either way: the pre-check only ever says
"allowed" when the exact check would. After a pre-check that could not decide, the next ``_SKIP``
spends go straight to the exact check (a mechanism that fills its windows to ε stays there).
"""

from __future__ import annotations

import collections
from typing import final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.kernels import compiled
from budgetcheck.ledger.exact import ExactVector

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
zeros = ExactVector.zeros
_SKIP = 8


@final
class _Entry:
    """The spends at one timestamp: an exact part without doubles (``base``: what footprint commits
    merged in), the amounts charged since (doubles), and their exact total once computed."""

    __slots__ = ("_exact", "_low", "base", "parts", "t")

    def __init__(
        self, t: int, parts: list[FloatArray], exact: ExactVector | None, *, base: ExactVector | None = None
    ) -> None:
        self.t = t
        self.base = base
        self.parts = parts
        self._exact = base if not parts else exact
        self._low: FloatArray | None = None

    def add(self, part: FloatArray, exact: ExactVector | None) -> None:
        """Another spend at t (``exact`` its exact value if known; else the total is recomputed when asked for).

        Interrupted anywhere (a signal handler that raises), the entry stays right: the total is forgotten
        before the part is added and known again only after."""
        known = self._exact
        self._exact = None
        self._low = None
        self.parts.append(part)
        if known is not None and exact is not None:
            self._exact = known + exact

    def copy(self) -> _Entry:
        entry = _Entry(self.t, list(self.parts), self._exact, base=self.base)
        entry._exact, entry._low = self._exact, self._low
        return entry

    def exact(self) -> ExactVector:
        if self._exact is None:
            total = self.base if self.base is not None else ExactVector.zeros(len(self.parts[0]))
            self._exact = sum((ExactVector.from_floats(part) for part in self.parts), total)
        return self._exact

    def terms(self) -> list[FloatArray]:
        """Doubles per run whose exact sum is <= the exact total: the charged amounts, and a lower
        bound of the merged exact part (the pre-check subtracts each of them error-free)."""
        if self.base is None:
            return self.parts
        if self._low is None:
            self._low = self.base.float_bounds()[0]
        return [self._low, *self.parts]


@final
class ExactWindows:
    """Σ_{k=t−w+1}^{t} ε_k for every run, exactly; propose first, commit after the check passes."""

    __slots__ = ("_bounds", "_entries", "_past", "_pending", "_runs", "_skip", "_sum", "_upper", "_w")

    def __init__(self, w: int, runs: int) -> None:
        self._w = w
        self._runs = runs
        # The timestamps inside the current window with spends.
        self._entries: collections.deque[_Entry] = collections.deque()
        # Entries that left the window, kept for w − 1 more timestamps: a footprint charge at a
        # timestamp of the current window changes windows that reach that far back.
        self._past: collections.deque[_Entry] = collections.deque()
        self._sum: ExactVector | None = zeros(runs)  # None: recompute from the entries
        # Quick commits not yet in _sum: amounts added, or an entry that left the window.
        self._pending: list[FloatArray | _Entry] = []
        # (hi, lo) per run, shape (2, runs), hi + lo >= the exact window sum (None: from _sum)
        self._upper: FloatArray | None = np.zeros((2, runs))
        self._skip = 0  # spends left that go straight to the exact check
        self._bounds: FloatArray | None = None  # see _bound_array

    @property
    def w(self) -> int:
        return self._w

    def copy(self) -> ExactWindows:
        """An independent copy (what a transaction of several spends restores if one is refused)."""
        other = ExactWindows(self._w, self._runs)
        copies = {id(entry): entry.copy() for entry in (*self._past, *self._entries)}
        other._entries = collections.deque(copies[id(entry)] for entry in self._entries)
        other._past = collections.deque(copies[id(entry)] for entry in self._past)
        other._sum, other._upper, other._skip = self._sum, self._upper, self._skip
        other._pending = [copies.get(id(item), item) if isinstance(item, _Entry) else item for item in self._pending]
        return other

    def prospective(self, t: int) -> tuple[ExactVector, int]:
        """The exact sum of window [t−w+1, t−1] before a spend at t, and how many entries leave."""
        window = self._exact_sum()
        leaving = 0
        for entry in self._entries:
            if entry.t > t - self._w:
                break
            window = window - entry.exact()
            leaving += 1
        return window, leaving

    def commit(self, t: int, amounts: FloatArray, added: ExactVector, proposed: ExactVector, leaving: int) -> None:
        """Record ``amounts`` (exactly ``added``) at t; ``proposed`` comes from :meth:`prospective` plus added
        (``leaving``, its count of entries that leave, is found again by their timestamps).

        Idempotent for the same ``amounts`` object: a commit interrupted half way (a signal handler that
        raised) is completed by calling it again (the ledger's in-flight operation)."""
        self._retire(t, quick=False)
        self._append(t, amounts, added)
        self._sum = proposed
        self._upper = None

    def quick_check(self, t: int, amounts: FloatArray, bound: float | FloatArray) -> tuple[FloatArray, int] | None:
        """Whether spending ``amounts`` (shape (runs,)) at t certainly keeps every run's window [t−w+1, t] <= bound:
        then (the new upper bounds, how many entries leave) for :meth:`commit_quick`, else None
        (undecided: use the exact check). Changes no window."""
        if self._skip:
            self._skip -= 1
            return None
        if self._upper is None:
            self._upper = _double_double_above(self._exact_sum())
        lows: list[FloatArray] = []
        leaving = 0
        for entry in self._entries:
            if entry.t > t - self._w:
                break
            lows += entry.terms()
            leaving += 1
        upper = np.empty((2, self._runs))
        if len(lows) == 1:  # a view, no copy
            stacked = lows[0].reshape(1, -1)
        else:
            stacked = np.stack(lows) if lows else np.empty((0, self._runs))
        bounds = bound.reshape(-1) if isinstance(bound, np.ndarray) else self._bound_array(bound)
        if not _bound_after(self._upper, stacked, amounts, bounds, upper):
            self._skip = _SKIP
            return None
        return upper, leaving

    def _bound_array(self, bound: float) -> FloatArray:
        """``bound`` as a 1-element array, kept while the bound stays the same (the ledger's ε)."""
        if self._bounds is None or self._bounds[0] != bound:
            self._bounds = np.full(1, bound)  # writable: the compiled check takes it as it takes the others
        return self._bounds

    def commit_quick(self, t: int, amounts: FloatArray, upper: FloatArray, leaving: int) -> None:
        """Record ``amounts`` at t after :meth:`quick_check` showed every window stays within ε (idempotent for
        the same ``amounts`` object, as :meth:`commit`)."""
        self._retire(t, quick=True)
        self._append(t, amounts, None)
        self._upper = upper
        if self._sum is not None and not (self._pending and self._pending[-1] is amounts):
            self._pending.append(amounts)
            if len(self._pending) > 2 * self._w:  # catching up would cost more than a fresh sum
                self._sum, self._pending = None, []

    def footprint(self, t: int, added: dict[int, ExactVector]) -> list[tuple[int, ExactVector, ExactVector]]:
        """Charges at several timestamps s <= t: (end, sum before, sum after) of every window that changes.

        The windows that change are those ending in [min s, t] (later windows are checked by the
        spends that reach them). Needs every s >= t − w + 1 (older entries are not kept).
        """
        first = min(added)
        # the kept totals in (first − w, t], by timestamp: the cost follows the entries and t − first, not w
        before = {e.t: e.exact() for e in (*self._past, *self._entries) if first - self._w < e.t <= t}
        after = dict(before)
        for s, units in added.items():
            after[s] = after[s] + units if s in after else units
        nothing = zeros(self._runs)
        sum_before = sum((units for s, units in before.items() if s <= first), nothing)
        sum_after = sum((units for s, units in after.items() if s <= first), nothing)
        windows = [(first, sum_before, sum_after)]
        for end in range(first + 1, t + 1):
            sum_before = sum_before + before.get(end, nothing) - before.get(end - self._w, nothing)
            sum_after = sum_after + after.get(end, nothing) - after.get(end - self._w, nothing)
            windows.append((end, sum_before, sum_after))
        return windows

    def commit_footprint(self, t: int, added: dict[int, ExactVector]) -> None:
        """Record charges at several timestamps (checked with :meth:`footprint`); t becomes the latest."""
        merged = {entry.t: entry.exact() for entry in (*self._past, *self._entries)}
        for s, units in added.items():
            merged[s] = merged.get(s, zeros(self._runs)) + units
        self._rebuild(t, merged)

    def shared_totals(self, runs: IntArray | None = None) -> dict[int, int] | None:
        """The exact total of every timestamp kept (current window and the w − 1 before it), when each
        is the same in all of ``runs`` (None: every run; a fixed schedule's spends): {t: units}; else None."""
        totals: dict[int, int] = {}
        for entry in (*self._past, *self._entries):
            value = entry.exact().shared(runs)
            if value is None:
                return None
            totals[entry.t] = value
        return totals

    def replace(self, t: int, totals: list[dict[int, int]], groups: list[IntArray | None]) -> None:
        """Make the state that of exact totals {s: units}, one dict per group of runs (the same in
        every run of the group; None: every run), with t the latest timestamp (what
        :meth:`shared_totals` and a checked series of spends give)."""
        stamps = sorted({s for kept in totals for s in kept if s > t - 2 * self._w + 1})  # what _rebuild keeps
        self._rebuild(
            t, {s: ExactVector.from_groups([kept.get(s, 0) for kept in totals], groups, self._runs) for s in stamps}
        )

    def load(self, t: int, spends: list[tuple[int, list[FloatArray]]]) -> None:
        """Make the state that of the spends of a grid session (``ledger.grid``) with t the latest: per timestamp
        of the last 2w (oldest first) its amounts in the order charged, as :meth:`commit` would have appended
        them; exact sums are taken when first read."""
        kept = [(s, parts) for s, parts in spends if s > t - 2 * self._w + 1]
        self._past = collections.deque(_Entry(s, list(parts), None) for s, parts in kept if s <= t - self._w)
        self._entries = collections.deque(_Entry(s, list(parts), None) for s, parts in kept if s > t - self._w)
        self._sum, self._pending, self._upper, self._skip = None, [], None, 0

    def _rebuild(self, t: int, totals: dict[int, ExactVector]) -> None:
        """The state of exact per-timestamp totals with t the latest: the window (t − w, t] and the
        w − 1 timestamps kept before it."""
        kept = sorted((s, units) for s, units in totals.items() if s > t - 2 * self._w + 1)
        self._past = collections.deque(_Entry(s, [], None, base=units) for s, units in kept if s <= t - self._w)
        self._entries = collections.deque(_Entry(s, [], None, base=units) for s, units in kept if s > t - self._w)
        self._sum = sum((entry.exact() for entry in self._entries), zeros(self._runs))
        self._pending, self._upper, self._skip = [], None, 0

    def _exact_sum(self) -> ExactVector:
        """The exact sum of the current window's entries (catching up on quick commits), computed aside and
        stored in one step: a signal handler that raises meanwhile leaves the state as it was."""
        total = self._sum
        if total is None:
            total = sum((entry.exact() for entry in self._entries), zeros(self._runs))
        else:
            for item in self._pending:
                if isinstance(item, _Entry):
                    total = total - item.exact()
                else:
                    total = total + ExactVector.from_floats(item)
        self._sum, self._pending = total, []  # no call between the two stores: nothing can run in between
        return total

    def _append(self, t: int, amounts: FloatArray, exact: ExactVector | None) -> None:
        """Add ``amounts`` at t, unless this very array object was added last (a commit completed again)."""
        last = self._entries[-1] if self._entries else None
        if last is not None and last.t == t:
            if not (last.parts and last.parts[-1] is amounts):
                last.add(amounts, exact)
        else:
            self._entries.append(_Entry(t, [amounts], exact))

    def _retire(self, t: int, *, quick: bool) -> None:
        """Move the entries that leave window [t−w+1, t] to the past (found by timestamp, each moved once
        even when a retirement interrupted half way is done again)."""
        oldest = t - self._w
        entries, past, pending = self._entries, self._past, self._pending
        while entries and entries[0].t <= oldest:
            entry = entries[0]
            if not (past and past[-1] is entry):
                past.append(entry)
            if quick and self._sum is not None and not (pending and pending[-1] is entry):
                pending.append(entry)
            entries.popleft()
        while past and past[0].t <= t - 2 * self._w + 1:
            past.popleft()


def _double_double_above(exact: ExactVector) -> FloatArray:
    """(hi, lo) per run, shape (2, runs), with hi + lo >= ``exact`` (>= 0) and close to it: hi a double
    above it, lo minus a lower bound of hi − exact (>= 0, so its bounds are whole-array)."""
    hi = exact.float_bounds()[1]
    out = np.empty((2, hi.size))
    if not np.isfinite(hi).all():  # a sum at the top of the doubles: (inf, 0) fails every check, no NaN
        out[0], out[1] = hi, 0.0
        return out
    lo = 0.0 - (ExactVector.from_floats(hi) - exact).float_bounds()[0]
    out[0] = hi + lo  # normalised by TwoSum (exact), as the pre-check keeps its pairs
    virtual = out[0] - hi
    out[1] = (hi - (out[0] - virtual)) + (lo - virtual)
    return out


@compiled
def _add_above(hi: float, lo: float, x: float) -> tuple[float, float]:
    """(hi', lo') with hi' + lo' >= hi + lo + x, exactly, and hi' = hi' + lo' rounded to nearest.

    hi + x = s + e exactly (TwoSum, Knuth TAOCP 2 §4.2.2: six operations in round-to-nearest, no
    fused multiply-add); t = lo + e, and when TwoSum's error shows it was rounded down, t is raised
    by |t|·2**-52 + 2**-1074 >= one ulp of t (rounding is monotone: at least the next double); then
    s + t is split again exactly. An overflow gives inf or NaN, which fails every check."""
    s = hi + x
    v = s - hi
    e = (hi - (s - v)) + (x - v)
    t = lo + e
    v = t - lo
    # rounded down: up by at least one ulp of t (also when subnormal); a select, not a branch
    t += abs(t) * 2.0**-52 + 2.0**-1074 if (lo - (t - v)) + (e - v) > 0.0 else 0.0
    total = s + t
    v = total - s
    return total, (s - (total - v)) + (t - v)


@compiled
def _bound_after(upper: FloatArray, lows: FloatArray, amounts: FloatArray, bound: FloatArray, out: FloatArray) -> bool:
    """The pre-check's arithmetic in one pass, per run: out = the double-double bound ``upper``
    (rows hi and lo, normalised: hi = hi + lo rounded to nearest) minus each term of the leaving
    entries (``lows``, one row per term, their exact sum <= the entries' exact total), then plus
    ``amounts``, by :func:`_add_above`. Whether every hi + lo <= ``bound`` (one value, or one per
    run), decided exactly: hi is hi + lo rounded to nearest, so hi < bound implies it, and hi ==
    bound needs lo <= 0. NaN fails."""
    his, los = out[0], out[1]
    his[:] = upper[0]
    los[:] = upper[1]
    for k in range(lows.shape[0] + 1):  # one contiguous pass per term (the compiler vectorises it)
        terms = amounts if k == lows.shape[0] else lows[k]
        sign = 1.0 if k == lows.shape[0] else -1.0
        for r in range(his.size):
            his[r], los[r] = _add_above(his[r], los[r], sign * terms[r])
    within = True
    per_run = 1 if bound.size > 1 else 0
    for r in range(his.size):
        limit = bound[r * per_run]
        within &= (his[r] < limit) | ((his[r] == limit) & (los[r] <= 0.0))
    return within
