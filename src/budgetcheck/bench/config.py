"""The benchmark as data: the 4-tuple (M, S, P, E) of Schäler, Hütter, Schäler 2022, §4.

A :class:`Benchmark` names the mechanisms M, the streams S, the privacy settings P (ε, w) and
the error metrics' parameters E (runs, MRE sanity bound). It is immutable and declarative:
``Benchmark.paper()`` is the paper's instantiation (its Table 4), ``Benchmark.quick()`` a small grid
that finishes in under a minute, ``Benchmark.from_toml(path)`` reads a file (see
``examples/benchmark.toml``), and ``select`` filters any of them. ``cells()`` lists the
(mechanism, stream, ε, w) cells; each cell is run, seeded and stored on its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench.real import PACKAGED, load_packaged, load_paper_stream
from budgetcheck.bench.streams import PAPER_GROWTH, seasonal_stream
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.validation import check_epsilon, check_positive_int

FloatArray = NDArray[np.float64]

PAPER_SEASONS = (40, 60, 80, 100, 120)
PAPER_AMPLITUDES = (10.0, 100.0, 1000.0, 10000.0)
PAPER_EPSILONS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
PAPER_WS = (40, 80, 120, 160, 200)
PAPER_MRE_BOUND = 0.001
HARNESS_MRE_BOUND = 0.01
# The packaged real streams of the paper grid (elecdemand, 17,520 timestamps, serves the Swellfish study).
PAPER_REAL = ("unemployment", "lung-deaths", "measles", "electricity", "visitor-nights")


def _season(value: object) -> int:
    return check_positive_int(value, "season")


def _amplitude(value: object) -> float:
    return check_epsilon(value, "amplitude")


def _length(value: object) -> int:
    return check_positive_int(value, "length")


def _growth(value: object) -> float:
    return check_epsilon(value, "growth")


def _w(value: object) -> int:
    return check_positive_int(value, "w")


def _runs(value: object) -> int:
    return check_positive_int(value, "runs")


def _streams_per_cell(value: object) -> int:
    return check_positive_int(value, "streams_per_cell")


def _seed(value: object) -> int:
    return check_positive_int(value, "seed", minimum=0)


def _mre_bound(value: object) -> float:
    return check_epsilon(value, "mre_bound")


def _settings(value: Iterable[Setting]) -> tuple[Setting, ...]:
    return _nonempty(tuple(sorted(set(value))), "settings")


def _streams(value: Iterable[StreamSpec]) -> tuple[StreamSpec, ...]:
    return _nonempty(tuple(value), "streams")


def _pool(value: Iterable[StreamSpec]) -> tuple[StreamSpec, ...]:
    return tuple(value)


def _setting_pool(value: Iterable[Setting]) -> tuple[Setting, ...]:
    return tuple(sorted(set(value)))


def _mechanisms(value: Iterable[str]) -> tuple[str, ...]:
    return _check_mechanisms(tuple(value))


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text (stable across processes and Python versions)."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@attrs.frozen
class ArtificialStream:
    """A seasonal stream of Algorithm 2 with period s, amplitude a, length p and growth e."""

    season: int = attrs.field(converter=_season)
    amplitude: float = attrs.field(converter=_amplitude)
    length: int = attrs.field(default=1000, converter=_length)
    growth: float = attrs.field(default=PAPER_GROWTH, converter=_growth)
    kind: Literal["artificial"] = "artificial"

    @property
    def name(self) -> str:
        suffix = "" if self.growth == PAPER_GROWTH else f"-e{self.growth:g}"
        return f"s{self.season}-a{self.amplitude:g}" + ("" if self.length == 1000 else f"-p{self.length}") + suffix

    @property
    def truncated(self) -> bool:
        """Releases are not truncated on artificial streams (the paper, §4.2 Level)."""
        return False

    def data(self, seed: int, draw: int = 0) -> FloatArray:
        """The ``draw``-th random stream of this (s, a) cell; draw 0 is the one a cell had before
        cells drew several (so ``streams_per_cell = 1`` keeps every earlier number)."""
        draw = check_positive_int(draw, "draw", minimum=0)
        parts = (seed, "stream", self.name) + ((draw,) if draw else ())
        rng = np.random.default_rng(stable_seed(*parts))
        return seasonal_stream(self.length, self.season, self.amplitude, growth=self.growth, rng=rng)


@attrs.frozen
class RealStream:
    """A packaged real stream (``budgetcheck.bench.real.PACKAGED``), or a paper stream read from
    the user's file when ``path`` is given; releases are truncated to max(0, round(·))."""

    name: str
    path: str | None = None
    kind: Literal["real"] = "real"

    def __attrs_post_init__(self) -> None:
        if self.path is None and self.name not in PACKAGED:
            raise InvalidArgument(
                f"stream={self.name!r} is not a packaged real stream; known: {', '.join(sorted(PACKAGED))}"
                " (or give a paper stream with its file path)"
            )

    @property
    def truncated(self) -> bool:
        return True

    def data(self, seed: int, draw: int = 0) -> FloatArray:
        """A real stream is one stream: every ``draw`` is the same data."""
        return load_packaged(self.name) if self.path is None else load_paper_stream(self.name, self.path)


StreamSpec = ArtificialStream | RealStream


@attrs.frozen(order=True)
class Setting:
    """A privacy setting (ε, w)."""

    epsilon: float = attrs.field(converter=check_epsilon)
    w: int = attrs.field(converter=_w)


@attrs.frozen(order=True)
class Cell:
    """One (mechanism, stream, ε, w) combination, run ``runs`` times in one batch."""

    mechanism: str
    stream: str
    epsilon: float
    w: int

    @property
    def key(self) -> str:
        return f"{self.mechanism}|{self.stream}|{self.epsilon!r}|{self.w}"


@attrs.frozen
class Batch:
    """Cells of one mechanism and w run in one pass with one seed: its streams (of one shape)
    stacked, each under every ε of ``epsilons`` (``runs`` runs per stream and ε)."""

    mechanism: str
    epsilons: tuple[float, ...]
    w: int
    streams: tuple[str, ...]
    seed: int

    def cells(self) -> list[Cell]:
        """Stream-major, then ε: the order of the pass's row blocks."""
        return [Cell(self.mechanism, stream, epsilon, self.w) for stream in self.streams for epsilon in self.epsilons]


@functools.lru_cache(maxsize=None)
def _max_stacked_runs(mechanism: str) -> int:
    from budgetcheck.mechanism.execute import max_stacked_runs
    from budgetcheck.mechanism.loading import load_mechanism

    return max_stacked_runs(load_mechanism(mechanism))


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


# M of the benchmark paper (Schäler et al. 2022, Table 2): the grid --paper reproduces. Built-ins
# beyond it (the §4.5 extensions of Kellaris et al.) run in the quick grid and by name.
PAPER_MECHANISMS = ("Uniform", "Sample", "BD", "BA", "Hybrid", "FASTw", "DSATw", "RescueDP", "AdaPub", "PeGaSus")


def builtin_w_event() -> tuple[str, ...]:
    """Every built-in w-event mechanism (M of the paper grid)."""
    from budgetcheck.mechanism.execute import notion_of
    from mechanisms import BUILTIN

    return tuple(name for name, factory in BUILTIN.items() if notion_of(factory()) == Notion.W_EVENT)


def _check_mechanisms(names: Sequence[str]) -> tuple[str, ...]:
    from budgetcheck.mechanism.execute import notion_of
    from budgetcheck.mechanism.loading import load_mechanism

    if not names:
        raise InvalidArgument("mechanisms=() must name at least one mechanism")
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgument(f"mechanisms entry {name!r} must be a string")
        if notion_of(load_mechanism(name)) != Notion.W_EVENT:
            raise InvalidArgument(
                f"mechanism={name!r} is not a w-event mechanism; the grid runs w-event mechanisms only"
            )
    return _unique(names)


def _nonempty(values: tuple[Any, ...], name: str) -> tuple[Any, ...]:
    if not values:
        raise InvalidArgument(f"{name}=() must not be empty")
    return values


@attrs.frozen
class Benchmark:
    """(M, S, P, E): mechanisms, streams, privacy settings, runs and the MRE sanity bound γ.

    ``streams_per_cell``: how many random streams each artificial (s, a) cell draws (Algorithm 2 is
    random; one stream per cell lets the seed move a cell's MAE 1.1-3.1×). Every stream runs
    ``runs`` runs; a cell's MAE is the mean over all of them and its spread is reported per stream.
    Real streams are one stream.
    """

    mechanisms: tuple[str, ...] = attrs.field(converter=_mechanisms)
    streams: tuple[StreamSpec, ...] = attrs.field(converter=_streams)
    settings: tuple[Setting, ...] = attrs.field(converter=_settings)
    runs: int = attrs.field(default=100, converter=_runs)
    mre_bound: float = attrs.field(default=PAPER_MRE_BOUND, converter=_mre_bound)
    seed: int = attrs.field(default=0, converter=_seed)
    streams_per_cell: int = attrs.field(default=1, converter=_streams_per_cell, kw_only=True)
    # The streams batches are formed from (empty: ``streams``). ``select`` keeps its parent's, so a
    # cell run in any sub-grid shares its batch, seed and numbers with the full grid.
    pool: tuple[StreamSpec, ...] = attrs.field(default=(), converter=_pool)
    # The same for the settings whose ε share a pass (every ε of one w).
    settings_pool: tuple[Setting, ...] = attrs.field(default=(), converter=_setting_pool)
    # The owner's consent for the benchmark's ledgers (WindowLedger(..., trusted_code=, allow_vouched=)): a
    # mechanism's in-process code and vouched sensitivities are refused unless the user allows them. Not in
    # :meth:`identity`: they change what runs, never the numbers of a mechanism that runs either way.
    trusted_code: bool = attrs.field(default=False, kw_only=True, validator=attrs.validators.instance_of(bool))
    allow_vouched: bool = attrs.field(default=False, kw_only=True, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        names = [stream.name for stream in self.streams]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise InvalidArgument(f"streams have duplicate names {duplicated}")
        outside = [stream.name for stream in self.streams if self.pool and stream not in self.pool]
        if outside:
            raise InvalidArgument(f"streams {outside} are not in the benchmark's pool {[s.name for s in self.pool]}")
        unpooled = [s for s in self.settings if self.settings_pool and s not in self.settings_pool]
        if unpooled:
            raise InvalidArgument(
                f"settings {unpooled} are not in the benchmark's settings pool {list(self.settings_pool)}"
            )

    # -- instantiations ---------------------------------------------------------------------
    @classmethod
    def paper(
        cls,
        *,
        growth: float = PAPER_GROWTH,
        real: Sequence[str] = PAPER_REAL,
        runs: int = 100,
        mre_bound: float = PAPER_MRE_BOUND,
        seed: int = 0,
    ) -> Benchmark:
        """The paper's grid: every built-in w-event mechanism; the 20 seasonal streams of length
        1000 and the real streams; vary-ε (w = 120) and vary-w (ε = 1); 100 runs."""
        streams: list[StreamSpec] = [
            ArtificialStream(s, a, 1000, growth) for a in PAPER_AMPLITUDES for s in PAPER_SEASONS
        ]
        streams += [RealStream(name) for name in real]
        settings = [Setting(e, 120) for e in PAPER_EPSILONS] + [Setting(1.0, w) for w in PAPER_WS]
        return cls(PAPER_MECHANISMS, streams, settings, runs, mre_bound, seed)

    @classmethod
    def quick(cls, *, seed: int = 0, streams_per_cell: int = 4) -> Benchmark:
        """A small grid (under a minute): every built-in w-event mechanism on four short seasonal
        cells, ε ∈ {0.5, 1} at w = 40 and w = 80 at ε = 1; 4 streams per cell × 5 runs (the 20
        runs per cell of one stream before, so about as fast)."""
        streams = [ArtificialStream(s, a, 300) for a in (10.0, 1000.0) for s in (40, 80)]
        settings = [Setting(0.5, 40), Setting(1.0, 40), Setting(1.0, 80)]
        runs = max(1, 20 // check_positive_int(streams_per_cell, "streams_per_cell"))
        return cls(builtin_w_event(), streams, settings, runs=runs, seed=seed, streams_per_cell=streams_per_cell)

    @classmethod
    def from_toml(cls, path: str | Path) -> Benchmark:
        """Read a benchmark file (see ``examples/benchmark.toml`` for every key)."""
        try:
            with Path(path).open("rb") as handle:
                table = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise InvalidArgument(f"benchmark file {str(path)!r} cannot be read: {error}") from error
        return cls.from_mapping(table)

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> Benchmark:
        """The TOML layout as a dict: top-level runs, seed, mre_bound, mechanisms (default: all
        built-in w-event), real (packaged names); tables artificial, files (name = path),
        vary_epsilon and vary_w; streams_per_cell (default 1)."""
        known = {
            "runs",
            "seed",
            "mre_bound",
            "mechanisms",
            "real",
            "artificial",
            "files",
            "vary_epsilon",
            "vary_w",
            "streams_per_cell",
        }
        unknown = sorted(set(table) - known)
        if unknown:
            raise InvalidArgument(f"unknown benchmark keys {unknown}; known: {sorted(known)}")
        streams: list[StreamSpec] = []
        artificial = _table(table, "artificial")
        if artificial:
            _known_keys(artificial, "artificial", {"seasons", "amplitudes", "length", "growth"})
            streams += [
                ArtificialStream(s, a, artificial.get("length", 1000), artificial.get("growth", PAPER_GROWTH))
                for a in _list(artificial, "amplitudes", "artificial")
                for s in _list(artificial, "seasons", "artificial")
            ]
        streams += [RealStream(str(name)) for name in table.get("real", [])]
        streams += [RealStream(str(name), str(path)) for name, path in _table(table, "files").items()]
        settings: list[Setting] = []
        vary_epsilon, vary_w = _table(table, "vary_epsilon"), _table(table, "vary_w")
        if vary_epsilon:
            _known_keys(vary_epsilon, "vary_epsilon", {"epsilons", "w"})
            settings += [
                Setting(e, vary_epsilon.get("w", 120)) for e in _list(vary_epsilon, "epsilons", "vary_epsilon")
            ]
        if vary_w:
            _known_keys(vary_w, "vary_w", {"ws", "epsilon"})
            settings += [Setting(vary_w.get("epsilon", 1.0), w) for w in _list(vary_w, "ws", "vary_w")]
        return cls(
            table.get("mechanisms") or builtin_w_event(),
            streams,
            settings,
            table.get("runs", 100),
            table.get("mre_bound", PAPER_MRE_BOUND),
            table.get("seed", 0),
            streams_per_cell=table.get("streams_per_cell", 1),
        )

    # -- use ------------------------------------------------------------------------------------
    def select(
        self,
        *,
        mechanisms: Sequence[str] = (),
        streams: Sequence[str] = (),
        epsilons: Sequence[float] = (),
        ws: Sequence[int] = (),
        runs: int | None = None,
        streams_per_cell: int | None = None,
    ) -> Benchmark:
        """The sub-grid of the named mechanisms/streams/ε/w (an empty filter keeps everything)."""
        for given, present, name in (
            (mechanisms, self.mechanisms, "mechanism"),
            (streams, self.stream_names, "stream"),
            (epsilons, {s.epsilon for s in self.settings}, "epsilon"),
            (ws, {s.w for s in self.settings}, "w"),
        ):
            missing = [value for value in given if value not in present]
            if missing:
                raise InvalidArgument(
                    f"{name}={missing[0]!r} is not in this benchmark; it has {sorted(present, key=str)}"
                )
        return attrs.evolve(
            self,
            mechanisms=[m for m in self.mechanisms if not mechanisms or m in mechanisms],
            streams=[s for s in self.streams if not streams or s.name in streams],
            settings=[s for s in self.settings if (not epsilons or s.epsilon in epsilons) and (not ws or s.w in ws)],
            runs=self.runs if runs is None else runs,
            streams_per_cell=self.streams_per_cell if streams_per_cell is None else streams_per_cell,
            pool=self.batch_pool,
            settings_pool=self.settings_pool or self.settings,
        )

    @property
    def stream_names(self) -> tuple[str, ...]:
        return tuple(stream.name for stream in self.streams)

    @property
    def batch_pool(self) -> tuple[StreamSpec, ...]:
        return self.pool or self.streams

    def stream(self, name: str) -> StreamSpec:
        for stream in self.batch_pool:
            if stream.name == name:
                return stream
        raise InvalidArgument(f"stream={name!r} is not in this benchmark")

    def draws(self, stream: StreamSpec) -> int:
        """The number of random streams a cell on ``stream`` runs on (1 for a real stream)."""
        return self.streams_per_cell if isinstance(stream, ArtificialStream) else 1

    def cells(self) -> list[Cell]:
        """Every cell, grouped by stream and setting (so the mechanisms of one column finish together)."""
        return [Cell(m, s.name, p.epsilon, p.w) for s in self.streams for p in self.settings for m in self.mechanisms]

    def batch(self, cell: Cell) -> Batch:
        """The cells run with ``cell`` in one vectorised pass, and their seed.

        Artificial streams of one length in the pool are stacked (``GuardedStream.stacked``); a real
        stream runs alone. The ε of the pool's settings with the cell's w, in ascending order, share
        passes (``WindowLedger.with_epsilons``) as far as the mechanism's ``max_stacked_runs``
        allows (at least one ε per pass). The batch, and so every
        number of the cell, depends on the benchmark's pools and the cell only, not on which cells
        are selected.
        """
        spec = self.stream(cell.stream)
        if isinstance(spec, ArtificialStream):
            members = tuple(
                s.name for s in self.batch_pool if isinstance(s, ArtificialStream) and s.length == spec.length
            )
        else:
            members = (cell.stream,)
        pooled = sorted({s.epsilon for s in self.settings_pool or self.settings if s.w == cell.w})
        stacked = len(members) * self.draws(spec) * self.runs
        per_pass = max(1, _max_stacked_runs(cell.mechanism) // stacked)  # ε in one pass
        chunks = [tuple(pooled[i : i + per_pass]) for i in range(0, len(pooled), per_pass)]
        epsilons = next(chunk for chunk in chunks if cell.epsilon in chunk)
        seed = stable_seed(self.seed, "batch", cell.mechanism, cell.w, *map(repr, epsilons), *members)
        return Batch(cell.mechanism, epsilons, cell.w, members, seed)

    def identity(self) -> dict[str, str]:
        """What makes stored results comparable: runs, seed, γ, each stream's definition, and how
        cells share a pass (which fixes their noise)."""
        out = {
            "runs": str(self.runs),
            "seed": str(self.seed),
            "mre_bound": repr(self.mre_bound),
            "batches": "streams-and-epsilons",
        }
        if self.streams_per_cell != 1:  # absent for one stream: files written before stay comparable
            out["streams_per_cell"] = str(self.streams_per_cell)
        for stream in self.streams:
            out[f"stream:{stream.name}"] = json.dumps(attrs.asdict(stream), sort_keys=True)
        return out


def _table(table: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = table.get(key, {})
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{key}={value!r} must be a table")
    return value


def _list(table: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = table.get(key)
    if not isinstance(value, list) or not value:
        raise InvalidArgument(f"{where}.{key}={value!r} must be a non-empty list")
    return value


def _known_keys(table: Mapping[str, Any], where: str, known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise InvalidArgument(f"unknown keys {unknown} in [{where}]; known: {sorted(known)}")
