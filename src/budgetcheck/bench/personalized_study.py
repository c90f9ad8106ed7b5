"""The personalized w-event study of Du et al. 2025, §5: PBD and PBA against BD and BA run under
the strictest requirement (min ε_i, max w_i), on the synthetic binary streams TLNS, Sin and Log.

Streams (§5.1): a probability sequence p_1..p_T; each of N users reports 1 with probability p_t
(bin 1) and 0 otherwise (bin 0), so d = 2 and the released histogram estimates (N(1−p_t), N p_t).
- TLNS: p_t = clip(p_{t−1} + N(0, 0.0025²), 0, 1), p_0 = 0.05;
- Sin: p_t = 0.05 sin(0.01 t) + 0.075;
- Log: p_t = 0.25 / (1 + e^{−0.01 t}).

Settings (Table 3 and §5.5): vary ε (ε ∈ {0.2, .., 1.0} at w = 120, users spread evenly over
ε_i ∈ {ε, .., 0.8, 1.0} × w_i ∈ {40, 80, .., w}); vary w (w ∈ {40, .., 200} at ε = 0.6); the ratio
o of users with ε_k = 1.0 (others 0.6, all w = 120) and the ratio o of users with w_k = 40 (others
120, all ε = 0.6), o ∈ {0.1, .., 0.9}.

Metrics: AMRE (Eq. 15) = 1/T Σ_τ (1/d) ‖r_τ − c_τ‖²₂ and AJSD (Eq. 16) = 1/T Σ_τ JSD(r_τ ‖ c_τ), on
frequency vectors: c_τ = counts / N; r_τ = releases / N, and for the JSD only, r_τ clipped at 0 and
renormalised (a distribution; all-zero → uniform), with 0 log 0 = 0 and natural logarithms.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import product
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import libm
from budgetcheck.bench.config import stable_seed
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.mechanism.execute import execute_personalized, notion_of
from budgetcheck.mechanism.loading import load_mechanism

FloatArray = NDArray[np.float64]
DATASETS = ("TLNS", "Sin", "Log")
MECHANISMS = ("PBD", "PBA", "StrictestBD", "StrictestBA", "PLBU")
REAL = ("Taxi", "Foursquare")  # Du et al.'s real streams: read from the user's downloads (budgetcheck.bench.du_streams)


def probabilities(dataset: str, length: int, rng: np.random.Generator) -> FloatArray:
    """p_1..p_T of TLNS, Sin or Log (Du et al. 2025, §5.1)."""
    t = np.arange(1, length + 1, dtype=np.float64)
    if dataset == "TLNS":
        return _tlns(length, rng)
    if dataset == "Sin":
        return np.asarray(0.05 * libm.sin(0.01 * t) + 0.075, dtype=np.float64)
    if dataset == "Log":
        return np.asarray(0.25 / (1.0 + libm.exp(-0.01 * t)), dtype=np.float64)
    raise InvalidArgument(f"dataset={dataset!r} must be one of {DATASETS}")


def _tlns(length: int, rng: np.random.Generator) -> FloatArray:
    """The clipped random walk: each step clips (a walk clipped once at the end would differ)."""
    steps = rng.normal(0.0, 0.0025, size=length)
    out = np.empty(length)
    p = 0.05
    for index, step in enumerate(steps):
        p = min(1.0, max(0.0, p + float(step)))
        out[index] = p
    return out


def binary_bins(p: FloatArray, users: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """(T, N) bins: user i is in bin 1 at t with probability p_t, else in bin 0."""
    return (rng.random((p.shape[0], users)) < p[:, None]).astype(np.int64)


def amre(truth: FloatArray, releases: FloatArray, users: int) -> FloatArray:
    """Eq. (15) per run: truth (T, d) counts, releases (runs, T, d)."""
    difference = (releases - truth) / users
    return np.asarray((difference**2).mean(axis=2).mean(axis=1), dtype=np.float64)


def ajsd(truth: FloatArray, releases: FloatArray, users: int) -> FloatArray:
    """Eq. (16) per run, on frequency vectors (see the module docstring)."""
    c = truth / users
    r = np.clip(releases, 0.0, None)
    total = r.sum(axis=2, keepdims=True)
    r = np.where(total > 0, r / np.where(total > 0, total, 1.0), 1.0 / r.shape[2])
    v = (r + c) / 2.0

    def kl(p: FloatArray, q: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(np.where(p > 0, p * libm.log(p / q), 0.0).sum(axis=2), dtype=np.float64)

    return np.asarray((0.5 * kl(r, v) + 0.5 * kl(np.broadcast_to(c, r.shape), v)).mean(axis=1), dtype=np.float64)


def _spread(users: int, requirements: Sequence[tuple[int, float]]) -> RequirementSet:
    """``users`` spread as evenly as possible over the requirements (w, ε), in order; with fewer users
    than requirements the last ones get none (a small real stream)."""
    base, extra = divmod(users, len(requirements))
    counts = [(req, base + (i < extra)) for i, req in enumerate(requirements)]
    return RequirementSet.from_counts([(req, n) for req, n in counts if n > 0])


def _ratio(users: int, first: tuple[int, float], second: tuple[int, float], o: float) -> RequirementSet:
    chosen = int(round(o * users))
    return RequirementSet.from_counts([(req, n) for req, n in ((first, chosen), (second, users - chosen)) if n > 0])


def _grid(top: float, low: float, step: float) -> list[float]:
    return [round(x, 10) for x in np.arange(low, top + step / 2, step)]


@attrs.frozen
class PersonalizedPoint:
    """One x-value of one experiment: its requirement set."""

    experiment: str
    x: float
    requirements: RequirementSet


def experiments(
    users: int,
    *,
    epsilons: Sequence[float] = (0.2, 0.4, 0.6, 0.8, 1.0),
    ws: Sequence[int] = (40, 80, 120, 160, 200),
    ratios: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
) -> list[PersonalizedPoint]:
    """The four experiments of Table 3 and §5.5 as requirement sets."""
    points = []
    for eps in epsilons:
        reqs = [(w, e) for e, w in product(_grid(1.0, eps, 0.2), range(40, 121, 40))]
        points.append(PersonalizedPoint("vary-epsilon", eps, _spread(users, reqs)))
    for w in ws:
        reqs = [(wi, e) for e, wi in product(_grid(1.0, 0.6, 0.2), range(40, w + 1, 40))]
        points.append(PersonalizedPoint("vary-w", float(w), _spread(users, reqs)))
    for o in ratios:
        points.append(PersonalizedPoint("ratio-epsilon", o, _ratio(users, (120, 1.0), (120, 0.6), o)))
    for o in ratios:
        points.append(PersonalizedPoint("ratio-w", o, _ratio(users, (40, 0.6), (120, 0.6), o)))
    return points


@attrs.frozen
class PersonalizedRow:
    """Mean AMRE and AJSD over the runs of one cell, the seconds its runs took together (the run time
    of Du et al.'s Figures 14 and 15) and the CPU seconds of the thread that ran them (NaN in rows
    written before either was kept)."""

    dataset: str
    experiment: str
    x: float
    mechanism: str
    amre: float
    ajsd: float
    seconds: float = math.nan
    cpu_seconds: float = math.nan


@attrs.frozen
class StudySpec:
    """What every unit of a study shares: the scale, the seed, the mechanisms and the real streams'
    paths ((name, path) pairs); a unit is one data set's one point, all mechanisms."""

    users: int
    length: int
    runs: int
    seed: int
    mechanisms: tuple[str, ...]
    real: tuple[tuple[str, str], ...] = ()


def _data(spec: StudySpec, dataset: str) -> tuple[NDArray[np.int64], int, int, FloatArray]:
    """(bins, d, users, true counts (T, d)) of a data set, made (synthetic) or read (real) once per process."""
    return _data_cached(dataset, spec.users, spec.length, spec.seed, dict(spec.real).get(dataset))


@functools.lru_cache(maxsize=2)
def _data_cached(
    dataset: str, users: int, length: int, seed: int, path: str | None
) -> tuple[NDArray[np.int64], int, int, FloatArray]:
    if path is not None:
        bins, d = _real_bins(dataset, path, length)
        n = int(bins.shape[1])
    else:
        rng = np.random.default_rng(stable_seed(seed, "personalized", dataset))
        bins, d, n = binary_bins(probabilities(dataset, length, rng), users, rng), 2, users
    truth = np.stack([(bins == j).sum(axis=1) for j in range(d)], axis=1).astype(np.float64)
    return bins, d, n, truth


def run_point(spec: StudySpec, dataset: str, point: PersonalizedPoint) -> list[PersonalizedRow]:
    """Every mechanism of ``spec`` at one point of one data set: one row each. Each cell draws from
    its own seed (the study's seed, the data set, the point and the mechanism), so a point gives the
    same rows wherever and in whatever order it runs."""
    bins, d, n, truth = _data(spec, dataset)
    rows = []
    for name in spec.mechanisms:
        started, cpu = time.perf_counter(), time.thread_time()
        execution = execute_personalized(
            load_mechanism(name),
            point.requirements,
            bins,
            dimensions=d,
            runs=spec.runs,
            seed=stable_seed(spec.seed, dataset, point.experiment, point.x, name),
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.thread_time() - cpu
        rows.append(
            PersonalizedRow(
                dataset,
                point.experiment,
                point.x,
                name,
                float(amre(truth, execution.releases, n).mean()),
                float(ajsd(truth, execution.releases, n).mean()),
                seconds,
                cpu_seconds,
            )
        )
    return rows


def _run_unit(unit: tuple[StudySpec, str, PersonalizedPoint]) -> list[PersonalizedRow]:
    return run_point(*unit)


def run_study(
    *,
    users: int = 10_000,
    length: int = 1000,
    runs: int = 10,
    seed: int = 0,
    datasets: Sequence[str] = DATASETS,
    points: Sequence[PersonalizedPoint] | Callable[[int], Sequence[PersonalizedPoint]] | None = None,
    mechanisms: Sequence[str] = MECHANISMS,
    progress: Callable[[str], None] | None = None,
    real: Mapping[str, str | Path] | None = None,
    progress_file: str | Path | None = None,
    scheduler: str | None = None,
) -> list[PersonalizedRow]:
    """Mean AMRE and AJSD over ``runs`` of every mechanism at every point of every dataset; ``real``
    adds Du et al.'s Taxi and Foursquare streams from the user's downloads ({name: path}), cut to
    ``length`` slots (their user counts are the data's). Every real stream is read before the first
    run, so a missing or malformed download is refused at once. ``points``: the points, or a function
    of the number of users giving them (a real stream's users are the data's); default all of Table 3.

    ``progress_file`` (JSON lines) stores every finished point (all its mechanisms); a run with the
    same file and parameters skips those (resumable), other parameters are refused. ``scheduler``: the
    address of a Dask scheduler that runs the points on its workers (:func:`on_dask`). The rows are the
    same, in the same order, whichever way the points ran."""
    for name in mechanisms:
        if notion_of(load_mechanism(name)) != Notion.PERSONALIZED:
            raise InvalidArgument(f"mechanism={name!r} is not a personalized w-event mechanism (the study runs those)")
    spec = StudySpec(
        users, length, runs, seed, tuple(mechanisms), tuple((name, str(path)) for name, path in (real or {}).items())
    )
    units: list[tuple[StudySpec, str, PersonalizedPoint]] = []
    for dataset in [*datasets, *(name for name, _ in spec.real)]:
        n = _data(spec, dataset)[2] if dataset in dict(spec.real) else users  # a real stream is read here, first
        chosen = experiments(n) if points is None else points(n) if callable(points) else points
        units += [(spec, dataset, point) for point in chosen]
    keys = [(dataset, point.experiment, point.x) for _, dataset, point in units]
    log = _ProgressFile(Path(progress_file), spec, keys) if progress_file is not None else None
    done: dict[tuple[str, str, float], list[PersonalizedRow]] = dict(log.points) if log is not None else {}
    todo = [unit for unit, key in zip(units, keys, strict=True) if key not in done]
    started = time.perf_counter()

    def finished(point_rows: list[PersonalizedRow]) -> None:
        first = point_rows[0]
        done[(first.dataset, first.experiment, first.x)] = point_rows
        if log is not None:
            log.append(point_rows)
        if progress is not None:
            progress(
                f"{first.dataset} {first.experiment} x={first.x:g}: "
                + ", ".join(f"{r.mechanism} {r.amre:.3g}" for r in point_rows)
                + f" (AMRE; {len(done)}/{len(units)} points, {time.perf_counter() - started:.0f} s)"
            )

    if progress is not None and len(todo) < len(units):
        progress(f"{len(units) - len(todo)} of {len(units)} points stored in {progress_file}: skipped")
    if scheduler is not None:
        from budgetcheck.bench.dask_pool import on_dask

        for point_rows in on_dask(_run_unit, todo, scheduler):
            finished(point_rows)
    else:
        for unit in todo:
            finished(_run_unit(unit))
    return [row for key in keys for row in done[key]]


class _ProgressFile:
    """JSON lines: the study's parameters and points, then one line per row of every finished point
    (appended and flushed as points finish); a point with fewer rows than mechanisms is run again."""

    def __init__(self, path: Path, spec: StudySpec, keys: Sequence[tuple[str, str, float]]) -> None:
        self._path = path
        header = {"study": "personalized-progress", "params": attrs.asdict(spec), "points": [list(k) for k in keys]}
        self.points: dict[tuple[str, str, float], list[PersonalizedRow]] = {}
        if path.exists() and path.stat().st_size:
            lines = path.read_text().splitlines()
            try:
                stored = json.loads(lines[0])
                rows = [PersonalizedRow(**json.loads(line)) for line in lines[1:] if line.strip()]
            except (ValueError, TypeError) as error:
                raise InvalidArgument(f"progress file {str(path)!r} is damaged ({error}); delete it") from error
            if stored != json.loads(json.dumps(header)):
                raise InvalidArgument(
                    f"progress file {str(path)!r} holds a study with other parameters or points "
                    f"({stored.get('params') if isinstance(stored, dict) else stored}); use another --out or delete it"
                )
            grouped: dict[tuple[str, str, float], list[PersonalizedRow]] = {}
            for row in rows:
                grouped.setdefault((row.dataset, row.experiment, row.x), []).append(row)
            self.points = {key: got for key, got in grouped.items() if len(got) == len(spec.mechanisms)}
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(header) + "\n")

    def append(self, rows: Sequence[PersonalizedRow]) -> None:
        with self._path.open("a") as handle:
            handle.write("".join(json.dumps(attrs.asdict(row)) + "\n" for row in rows))
            handle.flush()


def _real_bins(name: str, path: str | Path, length: int) -> tuple[NDArray[np.int64], int]:
    from budgetcheck.bench.du_streams import load_foursquare, load_taxi

    if name not in REAL:
        raise InvalidArgument(f"real stream {name!r} must be one of {REAL}")
    bins, d = load_taxi(path) if name == "Taxi" else load_foursquare(path)
    return bins[:length], d


def study_table(rows: Sequence[PersonalizedRow]) -> str:
    """AMRE (and AJSD) per dataset, experiment and x, one column per mechanism; best AMRE marked *."""
    names = list(dict.fromkeys(r.mechanism for r in rows))
    lines = [
        f"{'dataset':<8}{'experiment':<15}{'x':>6}  "
        + "".join(f"{n:>13}" for n in names)
        + "   (AMRE; AJSD of the best)"
    ]
    keys = list(dict.fromkeys((r.dataset, r.experiment, r.x) for r in rows))
    for key in keys:
        chosen = {r.mechanism: r for r in rows if (r.dataset, r.experiment, r.x) == key}
        best = min(chosen.values(), key=lambda r: r.amre)
        cells = "".join(
            f"{f'{chosen[n].amre:.3e}' + ('*' if chosen[n] is best else ' '):>13}" if n in chosen else f"{'-':>13}"
            for n in names
        )
        lines.append(f"{key[0]:<8}{key[1]:<15}{key[2]:>6g}  {cells}   {best.ajsd:.3e}")
    return "\n".join(lines)


RESULTS_NAME = "personalized.jsonl"


def write_results(rows: Sequence[PersonalizedRow], path: Path, params: Mapping[str, object]) -> Path:
    """The study's results file (JSON lines): ``{"study": "personalized", "params": ...}``, then one row
    per line; ``budgetcheck bench report`` reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"study": "personalized", "params": dict(params)})]
    lines += [json.dumps(attrs.asdict(row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_study(
    rows: Sequence[PersonalizedRow], out: str | Path, params: Mapping[str, object] | None = None
) -> list[Path]:
    """personalized.jsonl (the results file, with ``params``), personalized.csv, personalized.txt and the
    AMRE and AJSD figures (PNG, PDF) into ``out``."""
    from budgetcheck.bench.figures import study_curves
    from budgetcheck.bench.store import write_study_tables

    target = Path(out)
    files = [write_results(rows, target / RESULTS_NAME, params or {})]
    files += write_study_tables(rows, study_table(rows), target, "personalized")
    files += study_curves(
        [(r.dataset, r.experiment, r.x, r.mechanism, r.amre) for r in rows],
        target / "personalized_amre",
        ylabel="AMRE (log)",
        title="Personalized w-event: AMRE (Du et al. 2025, Eq. 15; cf. Figures 10-13)",
    )
    files += study_curves(
        [(r.dataset, r.experiment, r.x, r.mechanism, r.ajsd) for r in rows],
        target / "personalized_ajsd",
        ylabel="AJSD (log)",
        title="Personalized w-event: AJSD (Du et al. 2025, Eq. 16; cf. Figures 16-17)",
    )
    return files
