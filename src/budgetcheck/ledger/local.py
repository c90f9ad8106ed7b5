"""Frequency oracles for local randomisers: GRR and OUE, aggregated over a class of users.

Each reporting user perturbs its own value on its side; the aggregator only sees the support count
of every bin. The domain has d + 1 values: the d bins and ⊥ ("no value at t"), so a user who
reports nothing at t still sends a report and the number of reports (the public class size) says
nothing about who was present.

- GRR (generalized randomized response, Wang et al. 2017, "Locally Differentially Private Protocols
  for Frequency Estimation", §4.1): report the true value with p = e^ε/(e^ε + D − 1), any other with
  q = 1/(e^ε + D − 1); p/q = e^ε.
- OUE (optimized unary encoding, ibid. §4.3): one-hot vector, the true bit kept with 1/2, every
  other bit set with q = 1/(e^ε + 1); the ratio of any two inputs' probabilities is ((1 − q)/q) =
  e^ε. The ⊥ bit is never sent (dropping a coordinate is post-processing).
- Both give the unbiased estimate n̂_j = (S_j − n q)/(p − q) (p = 1/2 for OUE) for n reporters.
- Choice (ibid. §4.4; the LDP-IDS paper, Ren et al. SIGMOD'22, §3, runs the same adaptive
  frequency oracle): GRR iff its variance is smaller, i.e. D − 2 < 3 e^ε, else OUE.

e^ε is rounded down by 2^-48 (relative) before p and q are formed, so float error in the divisions
(a few ulp) can only shrink the realised ratio below e^ε; past the largest double it is capped there
(p/q stays finite, below e^ε). Below about ε = 2^-48 no two doubles p > q are within e^ε of each
other: such a budget (``realisable`` False) is charged as asked but its report is drawn with p = q,
independent of the value (0-LDP), and its class adds nothing to the estimate, which carries no
information about it. Otherwise the estimator uses the same p and q, so it is exactly unbiased for the
randomiser that runs.

Sampling a whole class at once is exact in distribution: under GRR the n_b users of true value b
send a Multinomial(n_b, (q, .., p, .., q)) vector of reports; under OUE bin j's support is
Binomial(n_j, 1/2) + Binomial(n − n_j, q). Vectorised over runs and classes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from budgetcheck import libm

FloatArray = NDArray[np.float64]
_DOWN = 1.0 - 2.0**-48
_LARGEST = float(np.finfo(np.float64).max)
GRR = "grr"
OUE = "oue"


def exp_down(epsilon: FloatArray) -> FloatArray:
    """e^ε rounded down (strictly below the exact value for ε > 0), at most the largest double · (1 − 2^-48)
    and, for ε > 0, at least 1 (so that q/p never exceeds e^ε either)."""
    with np.errstate(over="ignore"):
        down = np.minimum(libm.exp(epsilon), _LARGEST) * _DOWN
    return np.asarray(np.where(np.asarray(epsilon) > 0.0, np.maximum(down, 1.0), down), dtype=np.float64)


def realisable(epsilon: FloatArray) -> NDArray[np.bool_]:
    """Whether ε > 0 is large enough for an informative oracle (e^ε rounded down above 1, so p > q)."""
    return np.asarray(exp_down(epsilon) > 1.0)


def uses_grr(epsilon: FloatArray, d: int) -> NDArray[np.bool_]:
    """Wang et al. 2017, §4.4: GRR iff D − 2 < 3 e^ε, with D = d + 1 values (the bins and ⊥)."""
    with np.errstate(over="ignore"):
        return np.asarray((d + 1) - 2 < 3.0 * exp_down(epsilon))


def probabilities(epsilon: FloatArray, d: int) -> tuple[FloatArray, FloatArray]:
    """(p, q) of the oracle chosen for each budget: GRR's p = E/(E + D − 1), q = 1/(E + D − 1),
    OUE's p = 1/2, q = 1/(E + 1), E = e^ε rounded down. Zero budgets give p = q = 0 (no report)."""
    e = exp_down(epsilon)
    grr = uses_grr(epsilon, d)
    p = np.where(grr, e / (e + d), 0.5)
    q = np.where(grr, 1.0 / (e + d), 1.0 / (e + 1.0))
    off = epsilon <= 0.0
    return np.where(off, 0.0, p), np.where(off, 0.0, q)


def perturbed_estimate(
    rng: np.random.Generator, counts: FloatArray, sizes: FloatArray, epsilon: FloatArray
) -> FloatArray:
    """Σ over reporting classes of n̂_{c,j}: shape (runs, d).

    ``counts`` (classes, d) true users per class and bin, ``sizes`` (classes,) the class sizes n_c
    (users absent at t hold ⊥), ``epsilon`` (runs, classes) the budgets (0: the class does not report).
    """
    runs, classes = epsilon.shape
    d = counts.shape[1]
    whole = np.rint(counts).astype(np.int64)
    absent = np.rint(sizes).astype(np.int64) - whole.sum(axis=1)
    values = np.concatenate([whole, absent[:, None]], axis=1)  # (classes, D): the bins, then ⊥
    reporting = epsilon > 0.0
    n = np.where(reporting, np.rint(sizes)[None, :], 0.0)  # (runs, classes)
    p, q = probabilities(epsilon, d)
    grr = uses_grr(epsilon, d) & reporting
    support = np.zeros((runs, classes, d))
    if grr.any():
        users = np.where(grr[:, :, None], values[None, :, :], 0)  # (runs, classes, D)
        pvals = np.broadcast_to(q[:, :, None, None], (runs, classes, d + 1, d + 1)).copy()
        diagonal = np.arange(d + 1)
        pvals[:, :, diagonal, diagonal] = p[:, :, None]
        pvals[~grr] = 1.0 / (d + 1)  # unused rows (no users drawn): any valid distribution
        reports = rng.multinomial(users, pvals)  # (runs, classes, D from, D to)
        support += reports.sum(axis=2)[:, :, :d]
    oue = ~uses_grr(epsilon, d) & reporting
    if oue.any():
        own = np.where(oue[:, :, None], whole[None, :, :], 0)
        others = np.where(oue[:, :, None], np.rint(sizes).astype(np.int64)[None, :, None] - whole[None, :, :], 0)
        support += rng.binomial(own, 0.5) + rng.binomial(others, np.where(oue, q, 0.0)[:, :, None])
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = (support - (n * q)[:, :, None]) / (p - q)[:, :, None]
    informative = reporting & realisable(epsilon)  # p = q: the report says nothing, nothing to add
    return np.asarray(np.where(informative[:, :, None], estimate, 0.0).sum(axis=1), dtype=np.float64)


def estimate_variance(epsilon: FloatArray, sizes: FloatArray, d: int) -> FloatArray:
    """Variance of one bin's estimate, averaged over the D = d + 1 values, per run: shape (runs,).

    Var n̂_j = (n_j p(1 − p) + (n − n_j) q(1 − q))/(p − q)²; averaged over bins with Σ_j n_j = n it is
    (n q(1 − q) + (n/D)(p(1 − p) − q(1 − q)))/(p − q)² per class (Wang et al. 2017, Eq. 2 with the
    n_j term kept; LDP-IDS, Ren et al. 2022, uses the same average as its publication threshold).
    Computed from public budgets and class sizes only.
    """
    p, q = probabilities(epsilon, d)
    n = np.asarray(sizes, dtype=np.float64)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_class = (n * q * (1 - q) + n / (d + 1) * (p * (1 - p) - q * (1 - q))) / (p - q) ** 2
    return np.asarray(np.where(epsilon > 0.0, per_class, 0.0).sum(axis=1), dtype=np.float64)


def group_counts(bins: FloatArray, user_classes: NDArray[np.int64], classes: int, k: int, d: int) -> FloatArray:
    """True users per (class, group) and bin, shape (classes·k, d), from one timestamp's per-user bins
    (-1: absent). The j-th user of class c (column order) is in group j mod k: a public rule that
    depends on nothing but the requirement set (LDP-IDS's population division, Ren et al. 2022, §5)."""
    order = np.argsort(user_classes, kind="stable")
    position = np.empty_like(user_classes)
    starts = np.searchsorted(user_classes[order], np.arange(classes))
    position[order] = np.arange(user_classes.size) - starts[user_classes[order]]
    cell = user_classes * k + position % k
    slots = cell * (d + 1) + np.rint(bins).astype(np.int64) + 1
    counts = np.bincount(slots, minlength=classes * k * (d + 1)).reshape(classes * k, d + 1)[:, 1:]
    return np.asarray(counts, dtype=np.float64)
