"""The Swellfish case study of Tex, Schäler, Böhm, §5: power-consumption monitoring.

**Streams.** The paper's GEFCom 2012 zones cannot ship; a zone here is the packaged half-hourly
electricity demand (``elecdemand``, Victoria) rescaled to a zone's average consumption, in kW,
rounded: zone(m) = round(demand · m / mean(demand)), m ∈ {500, 5,000, 50,000} kW by default (the
paper's zones average 0.5 to 214 MW). The first ``length`` timestamps are used.

**Policy collections** (§5.1.3), one per simulated household, from this documented generator:
each appliance (name, power θ kW, pattern length T in half-hours, mean uses per day) is used a
Poisson number of times per day, at start times drawn from a daily profile (morning and evening
peaks); a use that would overlap the appliance's previous use is dropped (an appliance runs one
pattern at a time). Each use becomes a stream policy: thresholds θ repeated T times, relevance
interval of 4T timestamps starting 1.5T before the use (clipped to the stream). The global
sensitivity ΔQ is the sum of all appliances' power (all may run at once).

**Comparisons.** Intrinsic (Table 2): Uniform, Sample, BD, BA against TSUniform, TSSample, TSBD,
TSBA (TEAS effect) and Uniform, Sample against TINARUniform, TINARSample (TINAR effect), reported as
the MRE ratio Swellfish / w-event. Extrinsic: UnicornIS, UnicornPS, Unicorn against TSBD, TSBA and
RescueDP. The w-event mechanisms use w = the longest relevance interval and sensitivity ΔQ: they
run on Q/ΔQ and their releases are scaled back by ΔQ, which is Laplace noise of scale ΔQ/ε_t for
Uniform, Sample, BD and BA exactly (their decisions are scale-equivariant) and approximately for
RescueDP (its PID and Kalman defaults are not). ε = 1, MAE and MRE (γ as in the benchmark).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench.config import PAPER_MRE_BOUND, stable_seed
from budgetcheck.bench.dask_pool import on_dask
from budgetcheck.bench.metrics import errors
from budgetcheck.bench.real import load_packaged
from budgetcheck.bench.worker import start_worker
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.mechanism.execute import execute, execute_swellfish
from budgetcheck.mechanism.loading import load_mechanism

FloatArray = NDArray[np.float64]
W_EVENT = ("Uniform", "Sample", "BD", "BA", "RescueDP")
SWELLFISH = (
    "TSUniform",
    "TSSample",
    "TSBD",
    "TSBA",
    "TINARUniform",
    "TINARSample",
    "UnicornIS",
    "UnicornPS",
    "Unicorn",
)
TEAS_PAIRS = (("Uniform", "TSUniform"), ("Sample", "TSSample"), ("BD", "TSBD"), ("BA", "TSBA"))
TINAR_PAIRS = (("Uniform", "TINARUniform"), ("Sample", "TINARSample"))
EXTRINSIC = ("UnicornIS", "UnicornPS", "Unicorn", "TSBD", "TSBA", "RescueDP")


@attrs.frozen
class Appliance:
    """A household appliance: power θ (kW), pattern length (timestamps), mean uses per day."""

    name: str
    power: float
    duration: int
    uses_per_day: float


APPLIANCES = (
    Appliance("washing machine", 2.0, 4, 0.5),
    Appliance("dryer", 3.0, 3, 0.3),
    Appliance("dishwasher", 1.8, 3, 0.7),
    Appliance("oven", 2.4, 2, 0.6),
    Appliance("kettle", 2.2, 1, 3.0),
    Appliance("television", 0.15, 6, 1.0),
    Appliance("vacuum cleaner", 1.4, 1, 0.3),
    Appliance("electric vehicle", 7.4, 8, 0.2),
)
DAY = 48  # half-hours
# Relative start-time weights over a day: low at night, peaks at 7-9h and 18-21h.
_PROFILE = np.array([0.2] * 12 + [1.0] * 6 + [0.5] * 18 + [1.5] * 8 + [0.6] * 4)


def household_policies(
    length: int, rng: np.random.Generator, appliances: Sequence[Appliance] = APPLIANCES
) -> list[StreamPolicy]:
    """One household's policies over ``length`` timestamps (see the module docstring)."""
    policies = []
    profile = _PROFILE / _PROFILE.sum()
    for appliance in appliances:
        busy_until = 0
        starts = []
        for day in range(-(-length // DAY)):
            uses = rng.poisson(appliance.uses_per_day)
            starts += sorted(int(day * DAY + s + 1) for s in rng.choice(DAY, size=uses, p=profile))
        for start in starts:
            if start <= busy_until or start + appliance.duration - 1 > length:
                continue
            busy_until = start + appliance.duration - 1
            first = max(1, start - (3 * appliance.duration) // 2)
            last = min(length, first + 4 * appliance.duration - 1)
            policies.append(StreamPolicy(first, last, (appliance.power,) * appliance.duration))
    return policies


def zone_stream(mean_kw: float, length: int) -> FloatArray:
    """The packaged demand rescaled to a zone's average (kW), first ``length`` timestamps."""
    demand = load_packaged("elecdemand")[:length]
    return np.asarray(np.round(demand * (mean_kw / demand.mean())), dtype=np.float64)


@attrs.frozen
class SwellfishRow:
    zone: float
    household: int
    mechanism: str
    mae: float
    mre: float


@attrs.frozen
class StudyParams:
    """What a study computes; a progress file holds rows of exactly these parameters."""

    zones: tuple[float, ...] = (500.0, 5000.0, 50000.0)
    households: int = 5
    length: int = 2000
    runs: int = 20
    epsilon: float = 1.0
    seed: int = 0
    mechanisms: tuple[str, ...] = W_EVENT + SWELLFISH


def run_unit(params: StudyParams, zone: float, household: int) -> list[SwellfishRow]:
    """Mean MAE and MRE over the runs of every mechanism for one zone and household (picklable).

    Every cell is seeded from (seed, zone, household, mechanism): the same numbers in any order,
    in any process, and after a resume."""
    global_sensitivity = sum(a.power for a in APPLIANCES)
    truth = zone_stream(zone, params.length)
    policies = PolicyCollection(
        household_policies(params.length, np.random.default_rng(stable_seed(params.seed, "household", household)))
    )
    w = policies.max_interval
    rows = []
    for name in params.mechanisms:
        mechanism = load_mechanism(name)
        cell_seed = stable_seed(params.seed, "swellfish", zone, household, name)
        if name in W_EVENT:
            scaled = execute(
                mechanism, truth / global_sensitivity, epsilon=params.epsilon, w=w, runs=params.runs, seed=cell_seed
            )
            releases = scaled.releases * global_sensitivity
        else:
            releases = execute_swellfish(
                mechanism, policies, truth, epsilon=params.epsilon, runs=params.runs, seed=cell_seed
            ).releases
        mae, mre = errors(truth, releases, PAPER_MRE_BOUND)
        rows.append(SwellfishRow(zone, household, name, float(mae.mean()), float(mre.mean())))
    return rows


def _run_pair(params: StudyParams, unit: tuple[float, int]) -> list[SwellfishRow]:
    """:func:`run_unit` of one (zone, household) pair (a Dask task's one argument)."""
    return run_unit(params, *unit)


def run_study(
    *,
    zones: Sequence[float] = (500.0, 5000.0, 50000.0),
    households: int = 5,
    length: int = 2000,
    runs: int = 20,
    epsilon: float = 1.0,
    seed: int = 0,
    mechanisms: Sequence[str] = W_EVENT + SWELLFISH,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    progress_file: str | Path | None = None,
    scheduler: str | None = None,
) -> list[SwellfishRow]:
    """Mean MAE and MRE over ``runs`` of every mechanism, zone and household.

    ``jobs`` > 1 runs the (zone, household) units in local processes; ``scheduler`` (a Dask
    scheduler's address, e.g. ``tcp://host:8786``) runs them as one Dask task each on that cluster
    instead. ``progress_file`` (JSON lines) stores every unit as it finishes; a run with the same
    file and parameters skips those and returns the rows of the whole study (resumable, on either
    executor: a unit's numbers do not depend on where it ran), other parameters are refused."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgument(f"jobs={jobs!r} must be an integer >= 1")
    if scheduler is not None and jobs > 1:
        raise InvalidArgument(f"jobs={jobs} and scheduler={scheduler!r}: give one executor, not both")
    params = StudyParams(tuple(float(z) for z in zones), households, length, runs, epsilon, seed, tuple(mechanisms))
    log = _ProgressFile(Path(progress_file), params) if progress_file is not None else None
    done = {(r.zone, r.household) for r in (log.rows if log is not None else [])}
    units = [
        (zone, household) for zone in params.zones for household in range(households) if (zone, household) not in done
    ]
    rows = list(log.rows) if log is not None else []

    def finished(unit_rows: list[SwellfishRow]) -> None:
        rows.extend(unit_rows)
        if log is not None:
            log.append(unit_rows)
        if progress is not None:
            zone, household = unit_rows[0].zone, unit_rows[0].household
            progress(
                f"zone {zone:g} kW household {household}: "
                + ", ".join(f"{r.mechanism} {r.mre:.3g}" for r in unit_rows)
                + f" (MRE; {len({(r.zone, r.household) for r in rows})}/{len(params.zones) * households} units)"
            )

    if scheduler is not None:
        for unit_rows in on_dask(functools.partial(_run_pair, params), units, scheduler):
            finished(unit_rows)
    elif jobs == 1:
        for zone, household in units:
            finished(run_unit(params, zone, household))
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=start_worker) as pool:
            futures = [pool.submit(run_unit, params, zone, household) for zone, household in units]
            for future in as_completed(futures):
                finished(future.result())
    order = {
        (z, h, m): i
        for i, (z, h, m) in enumerate(
            (z, h, m) for z in params.zones for h in range(households) for m in params.mechanisms
        )
    }
    return sorted(rows, key=lambda r: order[(r.zone, r.household, r.mechanism)])


class _ProgressFile:
    """JSON lines: the parameters, then one line per finished row (appended and flushed as units finish)."""

    def __init__(self, path: Path, params: StudyParams) -> None:
        self._path = path
        header = {"params": attrs.asdict(params)}
        self.rows: list[SwellfishRow] = []
        if path.exists() and path.stat().st_size:
            lines = path.read_text().splitlines()
            stored = json.loads(lines[0])
            if stored != json.loads(json.dumps(header)):
                raise InvalidArgument(
                    f"{path} holds a study with other parameters ({stored['params']}); use another --out or delete it"
                )
            rows = [SwellfishRow(**json.loads(line)) for line in lines[1:] if line.strip()]
            per_unit: dict[tuple[float, int], int] = {}
            for row in rows:
                per_unit[(row.zone, row.household)] = per_unit.get((row.zone, row.household), 0) + 1
            self.rows = [
                r for r in rows if per_unit[(r.zone, r.household)] == len(params.mechanisms)
            ]  # whole units only
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(header) + "\n")

    def append(self, rows: list[SwellfishRow]) -> None:
        with self._path.open("a") as handle:
            handle.write("".join(json.dumps(attrs.asdict(row)) + "\n" for row in rows))
            handle.flush()


def predicted_ratios(length: int, seed: int, household: int) -> tuple[float, float]:
    """The MAE ratios TSUniform / Uniform and TINARUniform / Uniform that Tex et al.'s Theorems 6.1
    and 6.2 predict from a household's policies (expected |Lap(b)| = b): mean_t Δ_Q^t / ΔQ, and
    mean_t of max_t' Δ_Q^t' · max_{φ∈Φ_t} δ(J) / (ΔQ · w), 0 where no policy is relevant (the
    true value is released there). ΔQ = all appliances' power (the w-event mechanisms' sensitivity)."""
    policies = PolicyCollection(
        household_policies(length, np.random.default_rng(stable_seed(seed, "household", household)))
    )
    appliances = sum(a.power for a in APPLIANCES)
    w, policy_sensitivity = policies.max_interval, policies.global_sensitivity()
    teas, tinar = [], []
    for t in range(1, length + 1):
        relevant = policies.relevant(t)
        teas.append(policies.temporal_sensitivity(t) / appliances)
        tinar.append(
            policy_sensitivity * max(policies.delta(i) for i in relevant) / (appliances * w) if relevant else 0.0
        )
    return float(np.mean(teas)), float(np.mean(tinar))


def _mean_of(rows: Sequence[SwellfishRow], zone: float, name: str, metric: str = "mre") -> float:
    values = [getattr(r, metric) for r in rows if r.zone == zone and r.mechanism == name]
    return float(np.mean(values)) if values else float("nan")


def _mean_mre(rows: Sequence[SwellfishRow], zone: float, name: str) -> float:
    return _mean_of(rows, zone, name)


def study_table(rows: Sequence[SwellfishRow], *, length: int | None = None, seed: int = 0) -> str:
    """Intrinsic MRE ratios (TEAS, TINAR) and the extrinsic MRE, per zone (mean over households);
    with the study's ``length`` and ``seed``, also the MAE ratios Theorems 6.1 and 6.2 predict."""
    zones = sorted({r.zone for r in rows})
    head = f"{'':<28}" + "".join(f"{f'zone {z:g} kW':>16}" for z in zones)
    lines = ["Intrinsic: MRE(Swellfish) / MRE(w-event), < 1 = the effect helps (Table 2; cf. Figures 4 and 5)", head]
    for effect, pairs in (("TEAS", TEAS_PAIRS), ("TINAR", TINAR_PAIRS)):
        for base, improved in pairs:
            ratios = "".join(f"{_mean_mre(rows, z, improved) / _mean_mre(rows, z, base):>16.3g}" for z in zones)
            lines.append(f"{effect + ': ' + improved + ' / ' + base:<28}{ratios}")
    households = sorted({r.household for r in rows})
    if length is not None and households:
        predicted = np.mean([predicted_ratios(length, seed, h) for h in households], axis=0)
        lines += [
            "",
            f"MAE ratio measured vs predicted by Theorems 6.1 (TEAS) and 6.2 (TINAR) from the "
            f"{len(households)} households' policies",
            head + f"{'predicted':>16}",
        ]
        for (base, improved), value in (
            ((("Uniform", "TSUniform")), predicted[0]),
            (("Uniform", "TINARUniform"), predicted[1]),
        ):
            ratios = "".join(
                f"{_mean_of(rows, z, improved, 'mae') / _mean_of(rows, z, base, 'mae'):>16.3g}" for z in zones
            )
            lines.append(f"{improved + ' / ' + base:<28}{ratios}{value:>16.3g}")
    lines += ["", "Extrinsic: mean MRE (cf. Figure 6)", head]
    for name in EXTRINSIC:
        lines.append(f"{name:<28}" + "".join(f"{_mean_mre(rows, z, name):>16.3g}" for z in zones))
    return "\n".join(lines)


def write_study(
    rows: Sequence[SwellfishRow], out: str | Path, *, length: int | None = None, seed: int = 0
) -> list[Path]:
    """swellfish.csv, swellfish.txt and the MRE figure (PNG, PDF) into ``out``."""
    from budgetcheck.bench.figures import study_curves
    from budgetcheck.bench.store import write_study_tables

    target = Path(out)
    files = write_study_tables(rows, study_table(rows, length=length, seed=seed), target, "swellfish")
    zones = sorted({r.zone for r in rows})
    points = []
    for panel, names in (
        ("TEAS", [m for pair in TEAS_PAIRS for m in pair]),
        ("TINAR", [m for pair in TINAR_PAIRS for m in pair]),
        ("extrinsic", list(EXTRINSIC)),
    ):
        points += [("MRE", panel, z, name, _mean_mre(rows, z, name)) for name in names for z in zones]
    files += study_curves(
        [p for p in points if np.isfinite(p[4])],
        target / "swellfish_mre",
        ylabel="mean MRE (log)",
        title="Swellfish case study: MRE vs zone average (kW) (cf. Tex et al., Figures 4-6)",
        xlog=True,
    )
    return files
