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
never below the true one; a composition's matrix A_outer·A_inner is formed exactly too (in doubles only
where no partial sum can round). A claimed sensitivity is checked wherever a Linear sits in a query, a
query's parameters when it is built, and its possible answers before any charge: one that could pass the
largest double for stream values up to 2^53 is refused (whether a release is finite would otherwise tell
neighbours apart). Sparse matrices are kept as ``scipy.sparse`` CSC arrays (scipy loads
only for a sparse matrix: a dense one runs on the core install, which does not bring scipy).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import math
import numbers
import reprlib
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.validation import MAX_VALUE, check_declared_sensitivity
from budgetcheck.stream.hierarchy import Hierarchy

if TYPE_CHECKING:
    import scipy.sparse

FloatArray = NDArray[np.float64]
# d²·m up to which replace-one's max over pairs is computed exactly (beyond: 2·max column, a bound)
_PAIRWISE_MOST = 1 << 24
# the largest value a query may compute from stream values up to MAX_VALUE: far enough below the largest
# double (2^1024) that its rounded evaluation and the noise added to it stay finite
_ANSWER_MOST = 2.0**1000
_LARGEST = Fraction(np.finfo(np.float64).max)


class Relation(Protocol):
    """What a neighbouring relation tells a query (``budgetcheck.stream.neighbours.Neighbours``)."""

    @property
    def kind(self) -> str: ...

    @property
    def bound(self) -> int: ...


def _up(value: Fraction) -> float:
    """The least double >= value (inf past the largest double)."""
    if value > _LARGEST:
        return math.inf
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


def _integer_norms(ints: NDArray[np.object_], shift: int) -> Norms:
    """:class:`Norms` of the matrix ints·2^-shift (ints: Python integers), exactly, then rounded up."""
    m, d = ints.shape
    unit = _unit(shift)
    columns = [sum((abs(v) for v in ints[:, j]), 0) for j in range(d)]
    column = _up(max(columns, default=0) * unit)
    if d < 2:
        return Norms(column, 0.0)
    if d * d * max(m, 1) > _PAIRWISE_MOST:
        return Norms(column, _up(2 * Fraction(column)), pairwise_exact=False)
    rows = [list(ints[:, j]) for j in range(d)]
    best = max(sum(abs(a - b) for a, b in zip(rows[i], rows[j])) for i in range(d - 1) for j in range(i + 1, d))
    return Norms(column, _up(best * unit))


def _dense(matrix: Any) -> FloatArray:
    return np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=np.float64)


def _scaled(dense: FloatArray) -> tuple[FloatArray, int]:
    """(dense·2^shift, shift) with the fewest fractional bits shifted out: integer-valued doubles, exact
    (a power-of-two scaling; an entry that would overflow gives inf, which the caller takes as not exact)."""
    fractions, exponents = np.frexp(dense)
    mantissas = (fractions * 2.0**53).astype(np.int64)  # dense = mantissas·2^(exponents − 53), exactly
    nonzero = mantissas != 0
    if not nonzero.any():
        return dense, 0
    lowest = mantissas[nonzero] & -mantissas[nonzero]  # the lowest set bit: trailing zeros of the mantissa
    trailing = np.frexp(lowest.astype(np.float64))[1] - 1
    shift = max(0, int((53 - exponents[nonzero] - trailing).max()))
    with np.errstate(over="ignore"):
        return np.ldexp(dense, shift), shift


def _exact_integers(dense: FloatArray) -> tuple[NDArray[np.object_], int]:
    """(ints, shift) with dense = ints·2^-shift exactly, ints Python integers (any exponents)."""
    fractions, exponents = np.frexp(dense)
    mantissas = (fractions * 2.0**53).astype(np.int64)
    powers = exponents.astype(np.int64) - 53
    nonzero = mantissas != 0
    shift = -int(powers[nonzero].min()) if nonzero.any() else 0
    ints = np.zeros(dense.shape, dtype=object)
    for index in zip(*np.nonzero(nonzero), strict=True):
        ints[index] = int(mantissas[index]) << (int(powers[index]) + shift)
    return ints, shift


@attrs.frozen
class Product:
    """A product of two matrices computed exactly: ``ints``·2^-``shift`` (Python integers), and as doubles
    (``floats``, each entry rounded to nearest; ``exact`` says whether no entry was rounded)."""

    ints: NDArray[np.object_]
    shift: int
    floats: FloatArray
    exact: bool


def exact_product(outer: FloatArray, inner: FloatArray) -> Product:
    """outer·inner without rounding. Doubles when that is exact: both scaled by powers of two to integers
    whose products sum (in absolute value) below 2^52, so every partial sum is an integer below 2^53 in
    any order; else Python integers (a product of doubles formed in doubles can lose a whole column:
    2^53 + 1 − 2^53 gives 0)."""
    a, sa = _scaled(outer)
    b, sb = _scaled(inner)
    with np.errstate(over="ignore", invalid="ignore"):
        bound = (
            float((np.abs(a) @ np.abs(b)).max(initial=0.0))
            if np.isfinite(a).all() and np.isfinite(b).all()
            else math.inf
        )
    if bound <= 2.0**52:
        product = a @ b
        ints = np.rint(product).astype(np.int64).astype(object)
        floats = np.ldexp(product, -(sa + sb))
        exact = bool((np.ldexp(floats, sa + sb) == product).all())  # no entry fell below the smallest double
        return Product(ints, sa + sb, floats, exact)
    return integer_product(_exact_integers(outer), _exact_integers(inner), outer, inner)


def integer_product(
    outer: tuple[NDArray[np.object_], int], inner: tuple[NDArray[np.object_], int], *doubles: FloatArray
) -> Product:
    """The exact product of two matrices given as (Python integers, shift); ``doubles`` (the two as doubles,
    outer first) give the rounded product's entries."""
    (ia, sa), (ib, sb) = outer, inner
    ints = np.asarray(ia @ ib, dtype=object).reshape(ia.shape[0], ib.shape[1])
    shift = sa + sb
    with np.errstate(over="ignore", invalid="ignore"):
        floats = np.asarray(doubles[0] @ doubles[1], dtype=np.float64)
    unit = _unit(shift)
    exact = all(math.isfinite(f) and Fraction(f) == v * unit for f, v in zip(floats.flat, ints.flat, strict=True))
    return Product(ints, shift, floats, exact)


def _unit(shift: int) -> Fraction:
    """2^-shift, exactly."""
    return Fraction(1, 1 << shift) if shift >= 0 else Fraction(1 << -shift)


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
        """``outer`` applied to this query's answers (a composition of maps; both must be linear)."""
        if not isinstance(self, LinearQuery):
            raise InvalidArgument(
                f"then: only linear queries compose exactly, got query {type(self).__name__} as the inner map"
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
        _in_range(self.labels, value)

    def current(self) -> NDArray[np.int64]:
        """The labels as they are now, checked again (a copy): the array is read-only, but whoever holds it
        can make it writeable and change it in place, which must be seen, and refused before any charge if bad."""
        labels = _check_labels(self.labels)
        _in_range(labels, self.groups)
        return labels

    def apply(self, values: FloatArray) -> FloatArray:
        labels = self.current()
        _same_d(labels.size, int(values.shape[-1]))
        flat = values.reshape(-1, values.shape[-1])
        out = np.zeros((flat.shape[0], self.groups))
        member = np.flatnonzero(labels >= 0)
        rows = np.repeat(np.arange(flat.shape[0]), member.size)
        np.add.at(out, (rows, np.tile(labels[member], flat.shape[0])), flat[:, member].reshape(-1))
        return out.reshape(*values.shape[:-1], self.groups)

    def matrix(self, d: int) -> Any:
        labels = self.current()
        _same_d(labels.size, d)
        a = np.zeros((self.groups, d))
        member = np.flatnonzero(labels >= 0)
        a[labels[member], member] = 1.0
        return a

    def norms(self, d: int) -> Norms:
        labels = self.current()
        _same_d(labels.size, d)
        return group_norms(labels[None, :])


def _in_range(labels: NDArray[np.int64], groups: int) -> None:
    """Refuse a label past the last group (apply would index out of range after the charge)."""
    if labels.size and labels.max() >= groups:
        raise InvalidArgument(f"labels must lie in [-1, {groups}) for groups={groups}, got max {labels.max()}")


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


def _positive_int(name: str, value: object) -> int:
    """A query's integer parameter >= 1 (bools, floats and text refused, never truncated)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise InvalidArgument(f"{name}={value!r} must be an integer >= 1")
    return int(value)


def _lag(value: object) -> int:
    return _positive_int("lag", value)


def _width(value: object) -> int:
    return _positive_int("width", value)


@attrs.frozen
class Differences(LinearQuery):
    """y_j = x_{j+lag} − x_j, j < d − lag: changes across bins (e.g. a cumulative histogram's steps)."""

    lag: int = attrs.field(default=1, converter=_lag)

    def apply(self, values: FloatArray) -> FloatArray:
        return np.asarray(values[..., self.lag :] - values[..., : -self.lag], dtype=np.float64)

    def matrix(self, d: int) -> Any:
        if not 0 < self.lag < d:
            raise InvalidArgument(f"Differences(lag={self.lag}) needs 0 < lag < d={d}")
        return np.eye(d - self.lag, d, self.lag) - np.eye(d - self.lag, d)


@attrs.frozen
class Smoothing(LinearQuery):
    """y_j = mean(x_j, …, x_{j+width−1}), j <= d − width: a moving average across bins."""

    width: int = attrs.field(converter=_width)

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
    # a scipy.sparse matrix can only exist once scipy.sparse is loaded: a dense matrix never loads scipy,
    # which the core install does not bring (budgetcheck.extras)
    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and sparse.issparse(value):
        dtype = np.dtype(cast(Any, value).dtype)  # scipy ships no types: a sparse matrix's dtype, as numpy's
        if dtype.kind not in "biuf":
            raise InvalidArgument(f"weights must hold real numbers, got a sparse matrix of {dtype}")
        out = sparse.csc_array(value, dtype=np.float64)
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


def _claim(value: object) -> float | None:
    """A claimed sensitivity: None, or a finite number >= 0 (text, bools and overflowing integers refused)."""
    if value is None:
        return None
    claim = math.nan
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            claim = float(value)
        except OverflowError:
            pass
    if not claim >= 0.0 or not math.isfinite(claim):
        raise InvalidArgument(f"claimed={value!r} must be a finite number >= 0 (or None), the sensitivity claimed")
    return claim


@attrs.frozen(eq=False)
class Linear(LinearQuery):
    """Any matrix A (dense, or scipy.sparse for sparse bin weights). ``claimed``, if given, must equal
    the sensitivity the library computes under the stream's relation, else the release is refused."""

    weights: Any = attrs.field(converter=_matrix)
    claimed: float | None = attrs.field(default=None, converter=_claim)
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

    def sensitivity(self, relation: Relation, d: int) -> float:
        """The computed sensitivity; a ``claimed`` one that differs is refused, wherever this query sits."""
        computed = linear_sensitivity(self.norms(d), relation)
        if self.claimed is not None and not _same(self.claimed, computed):
            raise InvalidArgument(
                f"Linear query: claimed sensitivity {self.claimed!r} differs from the computed "
                f"{computed!r} under the stream's relation {relation}"
            )
        return computed

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


def _linear_part(what: str) -> Any:
    """An attrs validator: a part of a composed or clipped query must be linear (its sensitivity is computed
    from its matrix), refused at construction rather than failing at the first release."""

    def check(instance: object, attribute: object, value: object) -> None:
        if not isinstance(value, LinearQuery):
            raise InvalidArgument(
                f"query {what}={value!r} must be a linear query (Identity, Total, GroupSums, Differences, "
                "Smoothing, Linear, Composed, TreeSums): its sensitivity is computed from its matrix"
            )

    return check


@attrs.frozen(eq=False)
class Composed(LinearQuery):
    """outer(inner(x)): linear, with A = A_outer·A_inner; its sensitivity is computed from the product,
    formed exactly (:func:`exact_product`), so it is exact and at most the product of the two sensitivities."""

    outer: LinearQuery = attrs.field(validator=_linear_part("outer"))
    inner: LinearQuery = attrs.field(validator=_linear_part("inner"))

    def apply(self, values: FloatArray) -> FloatArray:
        return self.outer.apply(self.inner.apply(values))

    def product(self, d: int) -> Product:
        """A_outer·A_inner on d bins, exactly (a composed part's own product too, not its rounded doubles)."""
        inner = self.inner.product(d) if isinstance(self.inner, Composed) else None
        inner_dense = inner.floats if inner is not None else _dense(self.inner.matrix(d))
        rows = int(inner_dense.shape[0])
        outer = self.outer.product(rows) if isinstance(self.outer, Composed) else None
        outer_dense = outer.floats if outer is not None else _dense(self.outer.matrix(rows))
        if (inner is None or inner.exact) and (outer is None or outer.exact):
            return exact_product(outer_dense, inner_dense)
        return integer_product(
            (outer.ints, outer.shift) if outer is not None else _exact_integers(outer_dense),
            (inner.ints, inner.shift) if inner is not None else _exact_integers(inner_dense),
            outer_dense,
            inner_dense,
        )

    def matrix(self, d: int) -> Any:
        return self.product(d).floats

    def norms(self, d: int) -> Norms:
        product = self.product(d)
        return _integer_norms(product.ints, product.shift)

    def sensitivity(self, relation: Relation, d: int) -> float:
        check_claims(self, relation, d)
        return linear_sensitivity(self.norms(d), relation)

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
    check_claims(query, relation, d)
    check_answers(query, d)
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


_COLUMN_MAJOR: dict[int, tuple[LinearQuery, int, bytes, tuple[Any, ...]]] = {}


def _column_major(query: LinearQuery, d: int) -> tuple[Any, ...]:
    """The nonzeros of the query's matrix sorted by column: (rows, cols, |values|, column starts),
    remembered for the last few queries (a mechanism asks about the same tree at every timestamp) under
    the query's content, so that weights or labels changed in place since are seen."""
    content = _content(query)
    kept = _COLUMN_MAJOR.get(id(query))
    if kept is not None and kept[0] is query and kept[1] == d and kept[2] == content:
        return kept[3]
    if isinstance(query, Composed):
        product = query.product(d)
        if not product.exact:
            raise InvalidArgument(f"a weighted release needs a query whose matrix doubles hold exactly, got {query!r}")
        dense = product.floats
    else:
        dense = _dense(query.matrix(d))
    if not np.array_equal(dense, np.round(dense)):
        raise InvalidArgument(f"a weighted release needs a query with integer coefficients, got {query!r}")
    cols, rows = np.nonzero(dense.T)  # column-major order
    magnitudes = np.abs(dense[rows, cols])
    starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]]) if cols.size else np.zeros(0, dtype=np.int64)
    found = (rows, cols, magnitudes, starts)
    if len(_COLUMN_MAJOR) >= 8:
        _COLUMN_MAJOR.clear()
    _COLUMN_MAJOR[id(query)] = (query, d, content, found)
    return found


def _content(query: Query) -> bytes:
    """What a query's matrix depends on beyond its immutable parameters: the arrays it holds, which their
    holder can change in place (a Linear's weights, a GroupSums' labels), at any depth."""
    if isinstance(query, Linear):
        return _digest(query.weights)
    if isinstance(query, GroupSums):
        return np.ascontiguousarray(query.labels).tobytes()
    if isinstance(query, Composed):
        return b"(" + _content(query.outer) + b"|" + _content(query.inner) + b")"
    if isinstance(query, Clipped):
        return _content(query.query)
    return b""


def _finite(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"clip bounds must be finite numbers, got {value!r}")
    return float(value)


@attrs.frozen
class Clipped(Query):
    """``query`` on the counts clipped to [lower, upper]: clipping bounds what one bin can change
    by upper − lower, hence the sensitivity (an upper bound; see the module docstring)."""

    query: LinearQuery = attrs.field(validator=_linear_part("query"))
    lower: float = attrs.field(converter=_finite)
    upper: float = attrs.field(converter=_finite)

    def __attrs_post_init__(self) -> None:
        if not self.lower < self.upper:
            raise InvalidArgument(f"Clipped needs lower < upper, got lower={self.lower!r}, upper={self.upper!r}")

    def apply(self, values: FloatArray) -> FloatArray:
        return self.query.apply(np.clip(values, self.lower, self.upper))

    def sensitivity(self, relation: Relation, d: int) -> float:
        check_claims(self.query, relation, d)
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

    Refused: a declared sensitivity below the computed one, a :class:`Linear` query (at any depth) whose
    ``claimed`` sensitivity differs from the computed one, and a query whose answers can pass the largest
    double (:func:`check_answers`).
    """
    check_answers(query, d)
    computed = query.sensitivity(relation, d)  # checks every claim inside (Linear, Composed and Clipped do)
    return resolve(computed, relation, declared, type(query).__name__)


def check_claims(query: Query, relation: Relation, d: int) -> None:
    """Refuse a :class:`Linear` query, at any depth of ``query``, whose ``claimed`` sensitivity (as a query
    of its own, on the values it reads) differs from the computed one."""
    if isinstance(query, Linear):
        query.sensitivity(relation, d)
    elif isinstance(query, Composed):
        check_claims(query.inner, relation, d)
        check_claims(query.outer, relation, int(query.inner.matrix(d).shape[0]))
    elif isinstance(query, Clipped):
        check_claims(query.query, relation, d)


def check_answers(query: Query, d: int) -> None:
    """Refuse a query whose answers (or the values it computes on the way) can overflow for some stream
    of d bins with values up to 2^53. An infinite answer is released as inf or NaN whatever the noise, so
    whether a release is finite would tell neighbours apart; the refusal depends on public things only
    (the query and the value bound), never on the data."""
    bound = answer_bound(query, d, MAX_VALUE)
    if not bound <= _ANSWER_MOST:
        raise InvalidArgument(
            f"query={type(query).__name__}: its answers can reach {bound!r} for stream values up to 2^53, "
            f"more than {_ANSWER_MOST!r}: a double may overflow; scale the weights (or clip bounds) down"
        )


def answer_bound(query: Query, d: int, values: float) -> float:
    """An upper bound on |v| for every value v the query computes on d bins of |x_j| <= ``values``: its
    answers and the partial sums forming them (inf past :data:`_ANSWER_MOST` at an intermediate step).
    Row sums are summed in doubles: their relative error is far below the margin to the largest double."""
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(query, Clipped):
            lower, upper = query.lower, query.upper
            clip = max(abs(lower), abs(upper))
            overlap = lower <= values and upper >= -values  # a clipped value is then in [-values, values] too
            return answer_bound(query.query, d, min(values, clip) if overlap else clip)
        if isinstance(query, Composed):
            inner = answer_bound(query.inner, d, values)
            if not inner <= _ANSWER_MOST:
                return math.inf
            return answer_bound(query.outer, int(query.inner.matrix(d).shape[0]), inner)
        if isinstance(query, Linear):
            weights = query.weights
            magnitudes = abs(weights)
            rows = np.asarray(magnitudes.sum(axis=1), dtype=np.float64).reshape(-1)
            return float(rows.max(initial=0.0)) * values
        # the other queries sum, average or subtract at most d values with weights of magnitude <= 1
        return 2.0 * max(d, 1) * values


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
