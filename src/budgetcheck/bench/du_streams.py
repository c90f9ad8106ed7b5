"""Du et al. 2025's real per-user streams (§5.1), read from the user's downloads.

Both give per-user rows: ``bins`` of shape (T, n) (the cell or country of user i at slot t, −1 when
the user has no record in the slot) and the number of bins d, ready for ``PersonalizedStream`` or
``execute_personalized``. Neither data set can ship with the library.

- Taxi: Microsoft T-Drive (Yuan et al. 2010, 2011), the folder of per-taxi .txt files
  (id,YYYY-MM-DD HH:MM:SS,lon,lat). Duplicate records dropped; records outside
  A_E = [116, 116.8] × [39.5, 40.3] dropped; A_E cut into a 10 × 10 grid (100 cells, row-major);
  one slot per minute from the first record's minute to the last; a taxi's bin at a slot is the
  cell of its last record in that minute (the paper "samples records every minute").
- Foursquare: the global-scale check-ins of Yang et al. 2016 (dataset_TIST2015_Checkins.txt:
  user, venue, UTC time "Tue Apr 03 18:00:09 +0000 2012", offset; dataset_TIST2015_POIs.txt:
  venue, lat, lon, category, country code), tab separated. A venue becomes its country (bins: the
  country codes in sorted order); a uniform 5 % of the users (seeded) are kept; 100-minute slots
  from the first check-in; a user's bin at a slot is the country of its last check-in there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench.aggregate import grid_cells
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

IntArray = NDArray[np.int64]
TAXI_SOURCE = "Microsoft Research T-Drive trajectory data sample (the folder of per-taxi .txt files)"
FOURSQUARE_SOURCE = (
    "the Foursquare global-scale check-in dataset of Yang et al. 2016 (dataset_TIST2015_Checkins.txt "
    "and dataset_TIST2015_POIs.txt, from the authors' page sites.google.com/site/yangdingqi/home/foursquare-dataset)"
)
AE_BOX = (116.0, 116.8, 39.5, 40.3)  # Du et al. 2025, §5.1
TAXI_GRID = (10, 10)


def _missing(path: Path, what: str, source: str) -> DataUnavailable:
    return DataUnavailable(f"{what}: nothing at {str(path)!r}; download it from: {source}")


def _last_per_slot(slots: IntArray, users: IntArray, bins: IntArray, length: int, n: int) -> IntArray:
    """(T, n) table of each user's bin in each slot, the last record winning (records in time order)."""
    table = np.full((length, n), -1, dtype=np.int64)
    table[slots, users] = bins  # numpy assigns in order: a repeated (slot, user) keeps the last
    return table


def load_taxi(path: str | Path, *, slot_seconds: int = 60) -> tuple[IntArray, int]:
    """Du et al.'s Taxi stream: (bins (T, taxis), 100)."""
    folder = Path(path)
    if not folder.exists():
        raise _missing(folder, "Taxi", TAXI_SOURCE)
    files = sorted(p for p in folder.glob("*.txt") if p.is_file()) if folder.is_dir() else [folder]
    if not files:
        raise _missing(folder / "*.txt", "Taxi", TAXI_SOURCE)
    taxis, times, lons, lats = [], [], [], []
    for number, file in enumerate(files):
        rows = [line.strip().split(",") for line in file.read_text(encoding="utf-8", errors="replace").splitlines()]
        rows = [r for r in rows if len(r) == 4]
        if not rows:
            continue
        try:
            when = np.array([r[1] for r in rows], dtype="datetime64[s]").astype(np.int64)
            lon = np.array([r[2] for r in rows], dtype=np.float64)
            lat = np.array([r[3] for r in rows], dtype=np.float64)
        except ValueError as exc:
            raise InvalidArgument(f"{file}: a line is not id,YYYY-MM-DD HH:MM:SS,lon,lat ({exc})") from None
        taxis.append(np.full(when.size, number, dtype=np.int64))
        times.append(when)
        lons.append(lon)
        lats.append(lat)
    if not times:
        raise InvalidArgument(f"{folder}: no GPS records")
    records = np.unique(
        np.stack([np.concatenate(times), np.concatenate(taxis), np.concatenate(lons), np.concatenate(lats)]), axis=1
    )  # duplicates dropped; sorted by time
    when, taxi, lon, lat = records[0].astype(np.int64), records[1].astype(np.int64), records[2], records[3]
    cells = grid_cells(lon, lat, AE_BOX, TAXI_GRID)
    keep = cells >= 0
    if not keep.any():
        raise InvalidArgument(f"{folder}: no record inside lon [116, 116.8] × lat [39.5, 40.3]")
    slots = (when[keep] - when[keep].min()) // slot_seconds
    table = _last_per_slot(slots, taxi[keep], cells[keep], int(slots.max()) + 1, len(files))
    return table, TAXI_GRID[0] * TAXI_GRID[1]


def load_foursquare(
    path: str | Path, *, share: float = 0.05, slot_minutes: int = 100, seed: int = 0
) -> tuple[IntArray, int]:
    """Du et al.'s Foursquare stream: (bins (T, kept users), countries). ``path``: the folder holding
    both files of the data set."""
    folder = Path(path)
    checkins, pois = folder / "dataset_TIST2015_Checkins.txt", folder / "dataset_TIST2015_POIs.txt"
    for file in (checkins, pois):
        if not file.exists():
            raise _missing(file, "Foursquare", FOURSQUARE_SOURCE)
    if not 0.0 < share <= 1.0:
        raise InvalidArgument(f"share={share!r} must be in (0, 1]")
    country: dict[str, str] = {}
    for line in pois.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.rstrip("\n").split("\t")
        if len(fields) >= 5:
            country[fields[0]] = fields[4]
    codes = sorted(set(country.values()))
    index = {code: k for k, code in enumerate(codes)}
    users: list[str] = []
    stamps: list[np.datetime64] = []
    bins: list[int] = []
    for number, line in enumerate(checkins.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) < 3 or fields[1] not in country:
            continue  # invalid records (unknown venue) are removed, as in the paper
        parts = fields[2].split()
        if len(parts) != 6:
            raise InvalidArgument(
                f"{checkins}: line {number}: time {fields[2]!r} is not 'Tue Apr 03 18:00:09 +0000 2012'"
            )
        month = "JanFebMarAprMayJunJulAugSepOctNovDec".find(parts[1]) // 3 + 1
        if month < 1:
            raise InvalidArgument(f"{checkins}: line {number}: month {parts[1]!r} unknown")
        users.append(fields[0])
        stamps.append(np.datetime64(f"{parts[5]}-{month:02d}-{int(parts[2]):02d}T{parts[3]}", "s"))
        bins.append(index[country[fields[1]]])
    if not users:
        raise InvalidArgument(f"{checkins}: no check-in at a known venue")
    ids = sorted(set(users))
    rng = np.random.default_rng(seed)
    kept = np.sort(rng.choice(len(ids), size=max(1, round(share * len(ids))), replace=False))
    column = np.full(len(ids), -1, dtype=np.int64)
    column[kept] = np.arange(kept.size)
    user_column = column[np.searchsorted(ids, users)]
    seconds = np.array(stamps, dtype="datetime64[s]").astype(np.int64)
    order = np.argsort(seconds, kind="stable")
    slots = (seconds - seconds.min()) // (slot_minutes * 60)
    chosen = order[user_column[order] >= 0]
    table = _last_per_slot(
        slots[chosen], user_column[chosen], np.array(bins, dtype=np.int64)[chosen], int(slots.max()) + 1, kept.size
    )
    return table, len(codes)
