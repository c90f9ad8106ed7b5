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

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck._mechanism import execute, execute_swellfish
from budgetcheck._policies import PolicyCollection, StreamPolicy
from budgetcheck._verify import load_mechanism
from budgetcheck.bench.config import PAPER_MRE_BOUND, stable_seed
from budgetcheck.bench.metrics import errors
from budgetcheck.bench.real import load_packaged

FloatArray = NDArray[np.float64]
W_EVENT = ("Uniform", "Sample", "BD", "BA", "RescueDP")
SWELLFISH = ("TSUniform", "TSSample", "TSBD", "TSBA", "TINARUniform", "TINARSample", "UnicornIS", "UnicornPS", "Unicorn")
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
    Appliance("washing machine", 2.0, 4, 0.5), Appliance("dryer", 3.0, 3, 0.3), Appliance("dishwasher", 1.8, 3, 0.7),
    Appliance("oven", 2.4, 2, 0.6), Appliance("kettle", 2.2, 1, 3.0), Appliance("television", 0.15, 6, 1.0),
    Appliance("vacuum cleaner", 1.4, 1, 0.3), Appliance("electric vehicle", 7.4, 8, 0.2),
)
DAY = 48  # half-hours
# Relative start-time weights over a day: low at night, peaks at 7-9h and 18-21h.
_PROFILE = np.array([0.2] * 12 + [1.0] * 6 + [0.5] * 18 + [1.5] * 8 + [0.6] * 4)


def household_policies(length: int, rng: np.random.Generator, appliances: Sequence[Appliance] = APPLIANCES) -> list[StreamPolicy]:
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


def run_study(*, zones: Sequence[float] = (500.0, 5000.0, 50000.0), households: int = 5, length: int = 2000, runs: int = 20,
              epsilon: float = 1.0, seed: int = 0, mechanisms: Sequence[str] = W_EVENT + SWELLFISH,
              progress: Callable[[str], None] | None = None) -> list[SwellfishRow]:
    """Mean MAE and MRE over ``runs`` of every mechanism, zone and household."""
    global_sensitivity = sum(a.power for a in APPLIANCES)
    rows = []
    for zone in zones:
        truth = zone_stream(zone, length)
        for household in range(households):
            policies = PolicyCollection(household_policies(length, np.random.default_rng(stable_seed(seed, "household", household))))
            w = policies.max_interval
            for name in mechanisms:
                mechanism = load_mechanism(name)
                cell_seed = stable_seed(seed, "swellfish", zone, household, name)
                if name in W_EVENT:
                    scaled = execute(mechanism, truth / global_sensitivity, epsilon=epsilon, w=w, runs=runs, seed=cell_seed)
                    releases = scaled.releases * global_sensitivity
                else:
                    releases = execute_swellfish(mechanism, policies, truth, epsilon=epsilon, runs=runs, seed=cell_seed).releases
                mae, mre = errors(truth, releases, PAPER_MRE_BOUND)
                rows.append(SwellfishRow(zone, household, name, float(mae.mean()), float(mre.mean())))
                if progress is not None:
                    progress(f"zone {zone:g} kW household {household} {name}: MRE {rows[-1].mre:.3g}")
    return rows


def _mean_mre(rows: Sequence[SwellfishRow], zone: float, name: str) -> float:
    values = [r.mre for r in rows if r.zone == zone and r.mechanism == name]
    return float(np.mean(values)) if values else float("nan")


def study_table(rows: Sequence[SwellfishRow]) -> str:
    """Intrinsic MRE ratios (TEAS, TINAR) and the extrinsic MRE, per zone (mean over households)."""
    zones = sorted({r.zone for r in rows})
    head = f"{'':<28}" + "".join(f"{f'zone {z:g} kW':>16}" for z in zones)
    lines = ["Intrinsic: MRE(Swellfish) / MRE(w-event), < 1 = the effect helps (Table 2; cf. Figures 4 and 5)", head]
    for effect, pairs in (("TEAS", TEAS_PAIRS), ("TINAR", TINAR_PAIRS)):
        for base, improved in pairs:
            ratios = "".join(f"{_mean_mre(rows, z, improved) / _mean_mre(rows, z, base):>16.3g}" for z in zones)
            lines.append(f"{effect + ': ' + improved + ' / ' + base:<28}{ratios}")
    lines += ["", "Extrinsic: mean MRE (cf. Figure 6)", head]
    for name in EXTRINSIC:
        lines.append(f"{name:<28}" + "".join(f"{_mean_mre(rows, z, name):>16.3g}" for z in zones))
    return "\n".join(lines)


def write_study(rows: Sequence[SwellfishRow], out: str | Path) -> list[Path]:
    """swellfish.csv, swellfish.txt and the MRE figure (PNG, PDF) into ``out``."""
    from budgetcheck.bench.figures import study_curves

    from budgetcheck.bench.store import write_study_tables

    target = Path(out)
    files = write_study_tables(rows, study_table(rows), target, "swellfish")
    zones = sorted({r.zone for r in rows})
    points = []
    for panel, names in (("TEAS", [m for pair in TEAS_PAIRS for m in pair]), ("TINAR", [m for pair in TINAR_PAIRS for m in pair]),
                         ("extrinsic", list(EXTRINSIC))):
        points += [("MRE", panel, z, name, _mean_mre(rows, z, name)) for name in names for z in zones]
    files += study_curves([p for p in points if np.isfinite(p[4])], target / "swellfish_mre", ylabel="mean MRE (log)",
                          title="Swellfish case study: MRE vs zone average (kW) (cf. Tex et al., Figures 4-6)", xlog=True)
    return files
