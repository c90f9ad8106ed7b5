"""Table 6 of Schäler et al. 2022 (§5.3, "Properties of multi-dimensional streams") for every stream of
a results file, with the baseline-supremacy verdict (§5.1.2) of each stream beside it.

Properties, over every timestamp t = 1..p and dimension j = 1..dim of the true query results
Q(D_t)[j] (the paper's "query result distribution ... over all dimensions"), pooled over the
stream's random draws when a cell ran on several:
- dim, and the length p;
- q_min = min Q(D_t)[j], q_max = max Q(D_t)[j], and the 90% quantile (numpy's linear interpolation);
- the amplitude a = q_max − q_min (§5.2.2, "the true amplitude a = q_max − q_min").
Verdict: the (ε, w) settings of the stream in which Uniform or Sample is within 10% of the best mean
MAE (``report.Finding.supremacy``): "holds" in all, "fails" in none, "mixed" otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np

from budgetcheck.bench.config import ArtificialStream, StreamSpec
from budgetcheck.bench.report import SUPREMACY_MARGIN, Finding
from budgetcheck.bench.runner import stream_data
from budgetcheck.bench.tables import Value, write_table
from budgetcheck.ledger.errors import BudgetcheckError


@attrs.frozen
class StreamProperties:
    """One row of Table 6: a stream's shape and the distribution of its true query results."""

    stream: str
    kind: str
    dimensions: int
    length: int
    q_min: float
    q_max: float
    q90: float
    draws: int

    @property
    def amplitude(self) -> float:
        """a = q_max − q_min (Schäler et al. 2022, §5.2.2)."""
        return self.q_max - self.q_min


def stream_properties(spec: StreamSpec, seed: int, draws: int) -> StreamProperties:
    """Table 6's properties of one stream over its ``draws`` random draws (one for a real stream)."""
    artificial = isinstance(spec, ArtificialStream)
    count = draws if artificial else 1
    data = [stream_data(spec, seed, k) for k in range(count)]
    values = np.concatenate([d.ravel() for d in data])
    return StreamProperties(
        spec.name,
        "artificial" if artificial else "real",
        int(data[0].shape[1]),
        int(data[0].shape[0]),
        float(values.min()),
        float(values.max()),
        float(np.quantile(values, 0.9)),
        count,
    )


def verdict(holds: int, settings: int) -> str:
    """ "holds" in every setting, "fails" in none, "mixed" otherwise."""
    return "holds" if holds == settings else "fails" if holds == 0 else "mixed"


def write_stream_table(
    streams: Mapping[str, StreamSpec], found: Sequence[Finding], seed: int, draws: int, path: Path
) -> list[Path]:
    """table6.csv and table6.md: Table 6's properties and the supremacy verdict of every stream that has
    findings; a stream whose data cannot be read (a paper stream's file moved) keeps its verdict."""
    by_stream: dict[str, list[Finding]] = {}
    for f in found:
        by_stream.setdefault(f.stream, []).append(f)
    header = (
        "stream",
        "kind",
        "dim",
        "length p",
        "q_min",
        "q_max",
        "90% quantile",
        "amplitude a",
        "draws",
        "settings",
        "baseline within 10%",
        "supremacy",
        "best mechanisms",
    )
    rows: list[list[Value]] = []
    notes = []
    for name in sorted(by_stream, key=lambda n: (not isinstance(streams.get(n), ArtificialStream), n)):
        findings = by_stream[name]
        holds = sum(f.supremacy for f in findings)
        winners = ", ".join(sorted({f.best for f in findings}))
        tail: list[Value] = [len(findings), holds, verdict(holds, len(findings)), winners]
        spec = streams.get(name)
        try:
            if spec is None:
                raise KeyError(name)
            p = stream_properties(spec, seed, draws)
            rows.append(
                [p.stream, p.kind, p.dimensions, p.length, p.q_min, p.q_max, p.q90, p.amplitude, p.draws, *tail]
            )
        except (BudgetcheckError, KeyError, OSError) as error:
            rows.append([name, "-", None, None, None, None, None, None, None, *tail])
            notes.append(f"{name}: properties not computed ({error})")
    notes += [
        "q_min, q_max and the 90% quantile are taken over every timestamp and dimension of the true query "
        "results (Schäler et al. 2022, Table 6), pooled over the stream's random draws; a = q_max - q_min (§5.2.2).",
        f"baseline within {SUPREMACY_MARGIN:.0%}: the (eps, w) settings in which Uniform or Sample has a mean MAE "
        f"at most {1 + SUPREMACY_MARGIN:g} x the best mechanism's (the baseline supremacy of §5.1.2).",
    ]
    return write_table(
        path,
        header,
        rows,
        title="Stream properties and baseline supremacy (cf. Schäler et al. 2022, Table 6)",
        notes=notes,
    )


def write_supremacy_table(found: Sequence[Finding], path: Path) -> list[Path]:
    """supremacy.csv and supremacy.md: the verdict of every (stream, ε, w)."""
    header = ("stream", "epsilon", "w", "best", "best MAE", "baseline", "baseline MAE", "ratio", "supremacy")
    rows: list[list[Value]] = [
        [
            f.stream,
            f.epsilon,
            f.w,
            f.best,
            f.best_mae,
            f.baseline,
            f.baseline_mae,
            f.baseline_mae / f.best_mae if f.baseline else None,
            "yes" if f.supremacy else "no",
        ]
        for f in found
    ]
    holds = sum(f.supremacy for f in found)
    return write_table(
        path,
        header,
        rows,
        title="Baseline supremacy per stream and setting (Schäler et al. 2022, §5.1.2)",
        notes=[f"a baseline is within {SUPREMACY_MARGIN:.0%} of the best in {holds} of {len(found)} (stream, eps, w)."],
    )
