"""Queries whose L1 sensitivity the library derives from the stream's neighbouring relation.

A query maps one timestamp's histogram x (d bins) to m values. For a linear query y = A x with
columns A_j, and a change Δ = x' − x allowed by the relation (:mod:`budgetcheck.stream.neighbours`),
‖A Δ‖₁ <= Σ_j |Δ_j| ‖A_j‖₁, so the L1 sensitivity (Dwork, McSherry, Nissim, Smith 2006, Def. 3.1) is

- one-bin(k) and across-bins(k) (add or remove): k · max_j ‖A_j‖₁ — exact: Δ = k·e_j attains it;
- replace-one: max_{i≠j} ‖A_i − A_j‖₁ (0 when d = 1) — exact: Δ = e_i − e_j is the relation.

A clipped query A·clip(x, lo, hi) is not linear; clipping is 1-Lipschitz per bin, so each bin
changes by at most min(|Δ_j|, hi − lo), which bounds (upper bound, not always attained):
one-bin(k): min(k, hi − lo)·max_j ‖A_j‖₁; across-bins(k): min(k, d(hi − lo))·max_j ‖A_j‖₁;
replace-one: min(1, hi − lo)·max(max_j ‖A_j‖₁, max_{i≠j} ‖A_i − A_j‖₁) (a change a·e_i − b·e_j with
a, b in [0, c]; the norm is convex in (a, b), so its maximum is at a corner).

Norms are summed exactly (Fractions of the doubles) and rounded up, so a computed sensitivity is
never below the true one. Sparse matrices are kept as ``scipy.sparse`` CSC arrays (scipy loads
only when a matrix query is built).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import math
import numbers
import reprlib
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.validation import check_declared_sensitivity
from budgetcheck.stream.hierarchy import Hierarchy

if TYPE_CHECKING:
    import scipy.sparse

FloatArray = NDArray[np.float64]
# d²·m up to which replace-one's max over pairs is computed exactly (beyond: 2·max column, a bound)
_PAIRWISE_MOST = 1 << 24


class Relation(Protocol):
    """What a neighbouring relation tells a query (``budgetcheck.stream.neighbours.Neighbours``)."""

    @property
    def kind(self) -> str: ...

    @property
    def bound(self) -> int: ...


def _up(value: Fraction) -> float:
    """The least double >= value."""
    f = float(value)
    return f if Fraction(f) >= value else math.nextafter(f, math.inf)


@attrs.frozen
class Norms:
    """A matrix's max column L1 norm and max L1 norm of a difference of two columns (both rounded up);
    ``pairwise_exact`` is False when the second is the bound 2·max column (too large to enumerate)."""

    column: float
    pairwise: float
    pairwise_exact: bool = True


def matrix_norms(matrix: Any) -> Norms:
    """:class:`Norms` of an (m, d) dense or scipy.sparse matrix, exactly (then rounded up)."""
    dense = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix, dtype=np.float64)
    m, d = dense.shape
    sums = (sum((Fraction(float(v)) for v in np.abs(dense[:, j]) if v), Fraction(0)) for j in range(d))
    column = max((_up(total) for total in sums), default=0.0)
    if d < 2:
        return Norms(column, 0.0)
    if d * d * max(m, 1) > _PAIRWISE_MOST:
        return Norms(column, _up(2 * Fraction(column)), pairwise_exact=False)
    best = Fraction(0)
    for i in range(d - 1):  # differences of doubles are summed exactly: no rounding in the maximum
        for j in range(i + 1, d):
            pairs = zip(dense[:, i], dense[:, j])
            total = sum((abs(Fraction(float(a)) - Fraction(float(b))) for a, b in pairs if a != b), Fraction(0))
            best = max(best, total)
    return Norms(column, _up(best))


def linear_sensitivity(norms: Norms, relation: Relation) -> float:
    """The L1 sensitivity of a linear query with these norms under ``relation`` (module docstring)."""
    if relation.kind == "replace-one":
        return norms.pairwise
    return _column_bound(relation.bound, norms.column)


@functools.lru_cache(maxsize=1024)
def _column_bound(bound: int, column: float) -> float:
    """k·(max column norm) rounded up: exact Fraction arithmetic once per (k, norm), not at every
    charged operation (every release of a stream asks the same question of its one relation)."""
    return _up(bound * Fraction(column))


class Query(abc.ABC):
    """A query on one timestamp's histogram (last axis: the d bins); see the module docstring."""

    @abc.abstractmethod
    def apply(self, values: FloatArray) -> FloatArray:
        """The query on ``values`` of shape (..., d): shape (..., m)."""

    @abc.abstractmethod
    def sensitivity(self, relation: Relation, d: int) -> float:
        """Its L1 sensitivity on d bins under ``relation`` (exact unless :meth:`exact` says otherwise)."""

    def exact(self, relation: Relation, d: int) -> bool:
        """Whether :meth:`sensitivity` is the true maximum over neighbours (else an upper bound)."""
        return True

    @property
    def integral(self) -> bool:
        """Whether integer counts give integer answers (the discrete sampler's grid)."""
        return True

    def then(self, outer: LinearQuery) -> Composed:
        """``outer`` applied to this query's answers (a composition of maps)."""
        if not isinstance(self, LinearQuery):
            raise InvalidArgument(
                f"then: only linear queries compose exactly, got {type(self).__name__} as the inner map"
            )
        return Composed(outer=outer, inner=self)


class LinearQuery(Query):
    """y = A x: its sensitivity follows from A's column norms (module docstring)."""

    @abc.abstractmethod
    def matrix(self, d: int) -> Any:
        """A as an (m, d) dense array or scipy.sparse matrix."""

    def norms(self, d: int) -> Norms:
        return matrix_norms(self.matrix(d))

    def sensitivity(self, relation: Relation, d: int) -> float:
        return linear_sensitivity(self.norms(d), relation)

    def exact(self, relation: Relation, d: int) -> bool:
        return relation.kind != "replace-one" or self.norms(d).pairwise_exact


@attrs.frozen
class Identity(LinearQuery):
    """The counts themselves (A = I): sensitivity k (add/remove) or 2 (replace-one, d >= 2)."""

    def apply(self, values: FloatArray) -> FloatArray:
        return values

    def matrix(self, d: int) -> Any:
        return np.eye(d)

    def norms(self, d: int) -> Norms:
        return Norms(1.0, 2.0 if d >= 2 else 0.0)


@attrs.frozen
class Total(LinearQuery):
    """The sum over bins (A = 1ᵀ; e.g. a row count): k (add/remove), 0 (replace-one: n is fixed)."""

    def apply(self, values: FloatArray) -> FloatArray:
        return np.asarray(np.sum(values, axis=-1), dtype=np.float64)[..., None]

    def matrix(self, d: int) -> Any:
        return np.ones((1, d))

    def norms(self, d: int) -> Norms:
        return Norms(1.0, 0.0)


def _check_labels(value: object) -> NDArray[np.int64]:
    raw = np.asarray(value)
    if raw.dtype.kind not in "iu" or raw.ndim != 1 or (raw.size and raw.min() < -1):
        raise InvalidArgument(
            f"labels must be a one-dimensional integer array of groups >= 0 or -1 (no group), got {raw!r}"
        )
    frozen = raw.astype(np.int64)
    frozen.setflags(write=False)
    return frozen


@attrs.frozen(eq=False)
class GroupSums(LinearQuery):
    """Sums of disjoint groups of bins: bin j is in group labels[j] in [0, groups), or none (−1).

    A is 0/1 with at most one 1 per column: max column norm 1 if some bin is grouped (else 0);
    ‖A_i − A_j‖₁ is 2 for bins of two groups, 1 for a grouped and an ungrouped bin, 0 otherwise.
    """

    labels: NDArray[np.int64] = attrs.field(converter=_check_labels)
    groups: int = attrs.field()

    @groups.validator
    def _valid(self, attribute: object, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"groups={value!r} must be an integer >= 0")
        if self.labels.size and self.labels.max() >= value:
            raise InvalidArgument(f"labels must lie in [-1, {value}) for groups={value}, got max {self.labels.max()}")

    def apply(self, values: FloatArray) -> FloatArray:
        _same_d(self.labels.size, int(values.shape[-1]))
        flat = values.reshape(-1, values.shape[-1])
        out = np.zeros((flat.shape[0], self.groups))
        member = np.flatnonzero(self.labels >= 0)
        rows = np.repeat(np.arange(flat.shape[0]), member.size)
        np.add.at(out, (rows, np.tile(self.labels[member], flat.shape[0])), flat[:, member].reshape(-1))
        return out.reshape(*values.shape[:-1], self.groups)

    def matrix(self, d: int) -> Any:
        _same_d(self.labels.size, d)
        a = np.zeros((self.groups, d))
        member = np.flatnonzero(self.labels >= 0)
        a[self.labels[member], member] = 1.0
        return a

    def norms(self, d: int) -> Norms:
        _same_d(self.labels.size, d)
        return group_norms(self.labels[None, :])


def group_norms(labels: NDArray[np.int64]) -> Norms:
    """The largest :class:`GroupSums` norms over rows of per-run labels, shape (runs, d), in O(runs·d)."""
    grouped = labels >= 0
    if not grouped.any():
        return Norms(0.0, 0.0)
    ordered = np.sort(np.where(grouped, labels, -1), axis=1)
    distinct = (np.diff(ordered, axis=1) != 0) & (ordered[:, 1:] >= 0)
    groups_used = distinct.sum(axis=1) + (ordered[:, :1] >= 0).ravel()  # distinct groups per run
    two = bool((groups_used >= 2).any())
    one = bool(((groups_used >= 1) & ~grouped.all(axis=1)).any())
    return Norms(1.0, 2.0 if two else 1.0 if one else 0.0)


def _same_d(size: int, d: int) -> None:
    if size != d:
        raise InvalidArgument(f"the query is for {size} bins, the secret has d={d}")


@attrs.frozen
class Differences(LinearQuery):
    """y_j = x_{j+lag} − x_j, j < d − lag: changes across bins (e.g. a cumulative histogram's steps)."""

    lag: int = 1

    def apply(self, values: FloatArray) -> FloatArray:
        return np.asarray(values[..., self.lag :] - values[..., : -self.lag], dtype=np.float64)

    def matrix(self, d: int) -> Any:
        if not 0 < self.lag < d:
            raise InvalidArgument(f"Differences(lag={self.lag}) needs 0 < lag < d={d}")
        return np.eye(d - self.lag, d, self.lag) - np.eye(d - self.lag, d)


@attrs.frozen
class Smoothing(LinearQuery):
    """y_j = mean(x_j, …, x_{j+width−1}), j <= d − width: a moving average across bins."""

    width: int

    def apply(self, values: FloatArray) -> FloatArray:
        kernel = np.lib.stride_tricks.sliding_window_view(values, self.width, axis=-1)
        return np.asarray(kernel.mean(axis=-1), dtype=np.float64)

    def matrix(self, d: int) -> Any:
        if not 0 < self.width <= d:
            raise InvalidArgument(f"Smoothing(width={self.width}) needs 0 < width <= d={d}")
        return sum(np.eye(d - self.width + 1, d, s) for s in range(self.width)) / self.width

    @property
    def integral(self) -> bool:
        return self.width == 1


def _matrix(value: object) -> Any:
    import scipy.sparse  # noqa: PLC0415 — scipy loads only when a matrix query is built

    if scipy.sparse.issparse(value):
        dtype = np.dtype(cast(Any, value).dtype)  # scipy ships no types: a sparse matrix's dtype, as numpy's
        if dtype.kind not in "biuf":
            raise InvalidArgument(f"weights must hold real numbers, got a sparse matrix of {dtype}")
        out = scipy.sparse.csc_array(value, dtype=np.float64)
        data = out.data
    else:
        out = _dense_weights(value)
        data = out
        out.setflags(write=False)
    if out.ndim != 2 or not np.isfinite(data).all():
        raise InvalidArgument(f"matrix must be a finite two-dimensional array (m, d), got shape {out.shape}")
    return out


def _dense_weights(value: object) -> FloatArray:
    """A fresh float64 array of real weights: strings, complex numbers and other objects are refused, never
    converted (numpy would parse ``'1'`` and drop an imaginary part)."""
    expected = "a finite two-dimensional array (m, d) of real numbers"
    if isinstance(value, (str, bytes)) or value is None:
        raise InvalidArgument(f"weights={value!r} must be {expected}, not {type(value).__name__}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"weights={reprlib.repr(value)} must be {expected}: {exc}") from None
    reals = raw.dtype.kind in "biuf" or (
        raw.dtype.kind == "O" and all(isinstance(item, numbers.Real) for item in raw.flat)
    )
    if not reals:
        raise InvalidArgument(f"weights={reprlib.repr(value)} must be {expected}, got an array of {raw.dtype}")
    try:
        return np.array(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"weights={reprlib.repr(value)} must be {expected}: {exc}") from None


@attrs.frozen(eq=False)
class Linear(LinearQuery):
    """Any matrix A (dense, or scipy.sparse for sparse bin weights). ``claimed``, if given, must equal
    the sensitivity the library computes under the stream's relation, else the release is refused."""

    weights: Any = attrs.field(converter=_matrix)
    claimed: float | None = None
    _norms: Norms = attrs.field(init=False)
    _digest: bytes = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_norms", matrix_norms(self.weights))
        object.__setattr__(self, "_digest", _digest(self.weights))

    def apply(self, values: FloatArray) -> FloatArray:
        return np.asarray((self.weights @ values.T).T if values.ndim > 1 else self.weights @ values, dtype=np.float64)

    def matrix(self, d: int) -> Any:
        _same_d(int(self.weights.shape[1]), d)
        return self.weights

    def norms(self, d: int) -> Norms:
        _same_d(int(self.weights.shape[1]), d)
        digest = _digest(self.weights)
        if digest != self._digest:  # the weights were changed in place since: the norms are computed again
            object.__setattr__(self, "_norms", matrix_norms(self.weights))
            object.__setattr__(self, "_digest", digest)
        return self._norms

    @property
    def integral(self) -> bool:
        sparse = hasattr(self.weights, "data") and not isinstance(self.weights, np.ndarray)
        data = self.weights.data if sparse else self.weights
        return bool(np.array_equal(data, np.round(data)))


def _digest(weights: Any) -> bytes:
    """A hash of the matrix's numbers and structure (dense or sparse), O(nnz)."""
    parts = [repr(weights.shape).encode()]
    if isinstance(weights, np.ndarray):
        parts.append(np.ascontiguousarray(weights).tobytes())
    else:
        parts += [np.ascontiguousarray(a).tobytes() for a in (weights.data, weights.indices, weights.indptr)]
    return hashlib.sha256(b"|".join(parts)).digest()


@attrs.frozen(eq=False)
class Composed(LinearQuery):
    """outer(inner(x)): linear, with A = A_outer·A_inner; its sensitivity is computed from the product
    (exact, and at most the product of the two sensitivities)."""

    outer: LinearQuery
    inner: LinearQuery

    def apply(self, values: FloatArray) -> FloatArray:
        return self.outer.apply(self.inner.apply(values))

    def matrix(self, d: int) -> Any:
        inner = self.inner.matrix(d)
        inner = inner.toarray() if hasattr(inner, "toarray") else inner
        outer = self.outer.matrix(int(inner.shape[0]))
        outer = outer.toarray() if hasattr(outer, "toarray") else outer
        return np.asarray(outer @ inner, dtype=np.float64)

    @property
    def integral(self) -> bool:
        return self.outer.integral and self.inner.integral


@attrs.frozen(eq=False)
class TreeSums(LinearQuery):
    """The count of every node of a :class:`~budgetcheck.stream.hierarchy.Hierarchy` (leaves first,
    then the inner nodes): A[v, j] = 1 iff leaf j is v or below v (Chen et al. 2017, §5, AGG).

    One person in leaf j is counted in j and in each of its ancestors, so the max column norm is
    the number of levels above the deepest leaf, counted exactly from A (add/remove: k times that);
    replace-one: the largest symmetric difference of two leaves' ancestor sets, from AᵀA (integers,
    exact up to 4,096 leaves; beyond, the bound 2·max column).
    """

    hierarchy: Hierarchy = attrs.field()
    _norms: Norms = attrs.field(init=False)

    @hierarchy.validator
    def _valid(self, attribute: object, value: object) -> None:
        if not isinstance(value, Hierarchy):
            raise InvalidArgument(f"hierarchy={value!r} must be a budgetcheck Hierarchy")

    def __attrs_post_init__(self) -> None:
        a = np.rint(self.hierarchy.matrix()).astype(np.int64)
        counts = a.sum(axis=0)
        column = float(counts.max())
        d = self.hierarchy.leaves
        if d < 2:
            norms = Norms(column, 0.0)
        elif d > _TREE_PAIRWISE_MOST:
            norms = Norms(column, 2 * column, pairwise_exact=False)
        else:
            common = a.T @ a
            apart = counts[:, None] + counts[None, :] - 2 * common
            np.fill_diagonal(apart, 0)
            norms = Norms(column, float(apart.max()))
        object.__setattr__(self, "_norms", norms)

    def apply(self, values: FloatArray) -> FloatArray:
        _same_d(self.hierarchy.leaves, int(values.shape[-1]))
        flat = values.reshape(-1, values.shape[-1])
        out = np.zeros((flat.shape[0], self.hierarchy.nodes))
        out[:, : self.hierarchy.leaves] = flat
        for node in self.hierarchy.bottom_up():  # every inner node after its children
            out[:, node] = out[:, list(self.hierarchy.children_of(int(node)))].sum(axis=1)
        return out.reshape(*values.shape[:-1], self.hierarchy.nodes)

    def matrix(self, d: int) -> Any:
        _same_d(self.hierarchy.leaves, d)
        return self.hierarchy.matrix()

    def norms(self, d: int) -> Norms:
        _same_d(self.hierarchy.leaves, d)
        return self._norms


_TREE_PAIRWISE_MOST = 4096


def weighted_sensitivity(query: LinearQuery, d: int, weights: NDArray[np.int64], relation: Relation) -> FloatArray:
    """Per run r, the L1 sensitivity of diag(weights[r])·A under ``relation`` (A = the query's matrix,
    integer coefficients; weights (runs, m) integers >= 0): k·max_j Σ_i w_ri |A_ij| (add/remove,
    exact) and for replace-one the bound 2·max_j Σ_i w_ri |A_ij| (‖W(e_i − e_j)‖₁ <= both columns).
    Sums of integers below 2^53 are exact in doubles; a larger one is refused. O(runs · nnz(A))."""
    rows, cols, magnitudes, starts = _column_major(query, d)
    if weights.size and int(weights.max()) * float(magnitudes.sum() if magnitudes.size else 0.0) >= 2.0**53:
        raise InvalidArgument(f"weights up to {int(weights.max())} make the weighted sums too large to be exact")
    runs = weights.shape[0]
    if magnitudes.size == 0:
        return np.zeros(runs)
    terms = weights[:, rows].astype(np.float64) * magnitudes
    columns = np.add.reduceat(terms, starts, axis=1)
    largest = columns.max(axis=1)
    factor = 2 if relation.kind == "replace-one" else relation.bound
    return np.asarray(largest * factor, dtype=np.float64)  # integers < 2^53 (checked above) times a small integer


_COLUMN_MAJOR: dict[int, tuple[LinearQuery, int, tuple[Any, ...]]] = {}


def _column_major(query: LinearQuery, d: int) -> tuple[Any, ...]:
    """The nonzeros of the query's matrix sorted by column: (rows, cols, |values|, column starts),
    remembered for the last few queries (a mechanism asks about the same tree at every timestamp)."""
    kept = _COLUMN_MAJOR.get(id(query))
    if kept is not None and kept[0] is query and kept[1] == d and not isinstance(query, Linear):
        return kept[2]
    matrix = query.matrix(d)
    dense = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix, dtype=np.float64)
    if not np.array_equal(dense, np.round(dense)):
        raise InvalidArgument(f"a weighted release needs a query with integer coefficients, got {query!r}")
    cols, rows = np.nonzero(dense.T)  # column-major order
    magnitudes = np.abs(dense[rows, cols])
    starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]]) if cols.size else np.zeros(0, dtype=np.int64)
    found = (rows, cols, magnitudes, starts)
    if len(_COLUMN_MAJOR) >= 8:
        _COLUMN_MAJOR.clear()
    _COLUMN_MAJOR[id(query)] = (query, d, found)
    return found


def _finite(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"clip bounds must be finite numbers, got {value!r}")
    return float(value)


@attrs.frozen
class Clipped(Query):
    """``query`` on the counts clipped to [lower, upper]: clipping bounds what one bin can change
    by upper − lower, hence the sensitivity (an upper bound; see the module docstring)."""

    query: LinearQuery
    lower: float = attrs.field(converter=_finite)
    upper: float = attrs.field(converter=_finite)

    def __attrs_post_init__(self) -> None:
        if not self.lower < self.upper:
            raise InvalidArgument(f"Clipped needs lower < upper, got lower={self.lower!r}, upper={self.upper!r}")

    def apply(self, values: FloatArray) -> FloatArray:
        return self.query.apply(np.clip(values, self.lower, self.upper))

    def sensitivity(self, relation: Relation, d: int) -> float:
        norms = self.query.norms(d)
        width = Fraction(self.upper) - Fraction(self.lower)
        if relation.kind == "replace-one":
            return _up(min(Fraction(1), width) * Fraction(max(norms.column, norms.pairwise)))
        per_person = min(Fraction(relation.bound), width if relation.kind == "one-bin" else d * width)
        return _up(per_person * Fraction(norms.column))

    def exact(self, relation: Relation, d: int) -> bool:
        return False

    @property
    def integral(self) -> bool:
        return self.query.integral and float(self.lower).is_integer() and float(self.upper).is_integer()


def check_query(value: object) -> Query:
    """A query of the library's own vocabulary, all the way down: a subclass could read the values in
    its ``apply`` and state any sensitivity, so the vocabulary is closed (use ``measure`` instead)."""
    if type(value) not in _VOCABULARY:
        raise InvalidArgument(
            f"query={value!r} must be one of budgetcheck's queries (Identity, Total, GroupSums, "
            "Differences, Smoothing, Linear, Composed, Clipped, TreeSums), not a subclass or another type: "
            "their sensitivity "
            "is derived by the library; for anything else use ledger.measure (a vouched sensitivity)"
        )
    if isinstance(value, Composed):
        check_query(value.outer)
        check_query(value.inner)
    elif isinstance(value, Clipped):
        check_query(value.query)
    assert isinstance(value, Query)
    return value


def derived_sensitivity(query: Query, relation: Relation, d: int, declared: object) -> float:
    """The sensitivity a release of ``query`` uses: the computed one, or a larger ``declared`` (more noise).

    Refused: a declared sensitivity below the computed one, and a :class:`Linear` query whose
    ``claimed`` sensitivity differs from the computed one.
    """
    computed = query.sensitivity(relation, d)
    if isinstance(query, Linear) and query.claimed is not None and not _same(query.claimed, computed):
        raise InvalidArgument(
            f"Linear query: claimed sensitivity {query.claimed!r} differs from the computed "
            f"{computed!r} "
            f"under the stream's relation {relation}"
        )
    return resolve(computed, relation, declared, type(query).__name__)


def resolve(computed: float, relation: Relation, declared: object, what: str) -> float:
    """``declared`` if given and >= ``computed`` (refused if below), else ``computed``. A release whose
    answer does not depend on the data (computed 0) gets the noise of one person's contribution
    (the relation's bound k), never a scale of 0."""
    if computed == 0.0:
        computed = float(relation.bound)
    if declared is None:
        return computed
    declared = check_declared_sensitivity(declared)  # an int beyond every double is refused too, not an OverflowError
    if float(declared) < computed:
        raise InvalidArgument(
            f"sensitivity={declared!r} is below {computed!r}, the L1 sensitivity of {what} under the "
            f"stream's relation {relation}: a mechanism may ask for more noise, never less"
        )
    return float(declared)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(b))


def sparse_rows(weights: dict[int, float] | list[tuple[int, float]], d: int) -> scipy.sparse.csc_array:
    """Sparse bin weights {bin: weight} as a one-row scipy.sparse matrix (m = 1) for :class:`Linear`."""
    import scipy.sparse  # noqa: PLC0415

    items = list(weights.items()) if isinstance(weights, dict) else list(weights)
    cols = np.array([j for j, _ in items], dtype=np.int64)
    vals = np.array([v for _, v in items], dtype=np.float64)
    return scipy.sparse.csc_array((vals, (np.zeros(cols.size, dtype=np.int64), cols)), shape=(1, d))


_VOCABULARY = (Identity, Total, GroupSums, Differences, Smoothing, Linear, Composed, Clipped, TreeSums)
