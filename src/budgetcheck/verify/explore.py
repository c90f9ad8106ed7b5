"""Output-driven exploration: drive a mechanism with charged outputs the explorer chooses, no data.

Non-interference (verify's stage b) establishes that a mechanism's spends and releases are a
function of the outputs of its charged operations, its public parameters and its seed. So the
explorer runs it on a stand-in stream (all zeros; the mechanism never sees a value) through the
real exact ledger of its notion, and replaces every charged operation's output (Laplace releases,
measurements, dissimilarities, sampled releases, exact releases, AboveThreshold answers) with a
value it chooses, through the ledger's verifier tap. The ledger still checks and records every
charge, so a refused spend is seen with the sum it attempted. It then searches the output
sequences for the one that maximises the worst window sum / ε (Kellaris et al. 2014, Theorem 3;
per-user window / ε_i, Du et al. 2025; TOP_δ(J) sum / ε, Tex et al. Theorem 4.2): exhaustively
over short horizons (every branch of the tree of binary far-below / far-above choices), then by
a seeded beam search with mutation at w up to the profile's w_max over horizons of 4w, d up to 32.

Exploration runs one run per ledger (``runs=1``), so an operation's output has a leading axis of
one run, except AboveThreshold's (above, opened, starts) triple, whose leading axis is 3.

Intrusions (Kellaris et al. 2014, §4.5). A single unannounced intrusion needs nothing more: the
ledger records every held value a mechanism discards as an exposure, and the auditor adds the
largest exposure of each window. A mechanism under multiple announced intrusions (``intrusions ==
"announced"``) is explored with intrusions announced at every t ≡ 2 (mod 3) of every setting
(:meth:`Setting.announcing`): the ledger forces those publications, so a mechanism whose budget
state misses a forced publication asks for too much later and is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.audit_notions import audit_records
from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument
from budgetcheck.ledger.intrusions import ANNOUNCED
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.mechanism.execute import execute_on, notion_of
from budgetcheck.stream.guarded import GuardedStream, PersonalizedStream
from budgetcheck.verify.conformance import UNDECIDED, first_departure
from budgetcheck.verify.owner import ledger_flags
from budgetcheck.verify.tap import install_tap

FloatArray = NDArray[np.float64]

# What an output entry may be set to: far below and far above anything a mechanism compares
# against, the boundary values 0 and ±1, and values in between (thresholds 1/ε_t of budgets
# between 10^-3 and 1, and the noisy counts of small streams).
VALUES: tuple[float, ...] = (-1e9, -1e3, -1.0, 0.0, 0.5, 1.0, 2.0, 10.0, 1e3, 1e9)
LOW, HIGH = 0, len(VALUES) - 1  # the two codes of the exhaustive tree: far below, far above


@attrs.frozen
class Setting:
    """Public parameters of one explored run: the notion's budget, the horizon, d and the seed."""

    notion: Notion = attrs.field(converter=Notion)
    length: int
    dimensions: int
    epsilon: float = 1.0
    w: int = 1
    classes: tuple[tuple[int, float, int], ...] = ()  # personalized: (w_c, ε_c, users of the class)
    policies: tuple[tuple[int, int, tuple[float, ...]], ...] = ()  # swellfish: (start, end, thresholds)
    seed: int = 1
    intrusions: tuple[int, ...] = ()  # w-event: timestamps announced as intruded (Kellaris et al. §4.5)

    @property
    def window(self) -> int:
        """The largest window the run exercises: w, max w_c, or max |J| (Theorem 4.3)."""
        if self.notion == Notion.PERSONALIZED:
            return max(w for w, _, _ in self.classes)
        if self.notion == Notion.SWELLFISH:
            return max(end - start + 1 for start, end, _ in self.policies)
        return self.w

    def describe(self) -> str:
        if self.notion == Notion.PERSONALIZED:
            return f"classes (w, epsilon, users) {list(self.classes)}, T={self.length}, d={self.dimensions}"
        if self.notion == Notion.SWELLFISH:
            return f"epsilon={self.epsilon}, policies {list(self.policies)}, T={self.length}, d={self.dimensions}"
        announced = f", intrusions announced at t={list(self.intrusions)}" if self.intrusions else ""
        return f"epsilon={self.epsilon}, w={self.w}, T={self.length}, d={self.dimensions}{announced}"

    def to_json(self) -> dict[str, Any]:
        return {
            "notion": self.notion.value,
            "length": self.length,
            "dimensions": self.dimensions,
            "epsilon": self.epsilon,
            "w": self.w,
            "classes": [list(c) for c in self.classes],
            "policies": [[s, e, list(th)] for s, e, th in self.policies],
            "seed": self.seed,
            "intrusions": list(self.intrusions),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Setting:
        return cls(
            notion=str(value["notion"]),
            length=int(value["length"]),
            dimensions=int(value["dimensions"]),
            epsilon=float(value.get("epsilon", 1.0)),
            w=int(value.get("w", 1)),
            classes=tuple((int(w), float(e), int(n)) for w, e, n in value.get("classes", ())),
            policies=tuple((int(s), int(e), tuple(float(x) for x in th)) for s, e, th in value.get("policies", ())),
            seed=int(value.get("seed", 1)),
            intrusions=tuple(int(t) for t in value.get("intrusions", ())),
        )

    def requirements(self) -> RequirementSet:
        return RequirementSet([(w, eps) for w, eps, users in self.classes for _ in range(users)])

    def collection(self) -> PolicyCollection:
        return PolicyCollection([StreamPolicy(s, e, th) for s, e, th in self.policies])

    def ledger(self) -> LedgerCore:
        """The real exact ledger of the notion, one run, reproducible noise (what the tap replaces)."""
        common: dict[str, Any] = {
            "runs": 1,
            "seed": self.seed,
            "sampler": "numpy-laplace",
            "keep_records": True,
            **ledger_flags(),
        }
        if self.notion == Notion.PERSONALIZED:
            return PersonalizedLedger(self.requirements(), **common)
        if self.notion == Notion.SWELLFISH:
            return SwellfishLedger(self.collection(), epsilon=self.epsilon, **common)
        ledger = WindowLedger(WEventParams(epsilon=self.epsilon, w=self.w), **common)
        for t in self.intrusions:  # the curator detected them: the ledger forces these publications
            ledger.announce_intrusion(t)
        return ledger

    def announcing(self) -> Setting:
        """This setting with an intrusion announced at every t ≡ 2 (mod 3): runs of one, two and three
        timestamps without one, forced publications early in a window, late in it and back to back
        across windows of every explored w."""
        return attrs.evolve(self, intrusions=tuple(t for t in range(1, self.length + 1) if t % 3 == 2))

    def stream(self) -> GuardedStream | PersonalizedStream:
        """A stand-in stream of zeros: the charged outputs the mechanism sees are the explorer's."""
        if self.notion == Notion.PERSONALIZED:
            users = sum(n for _, _, n in self.classes)
            bins = np.zeros((self.length, users), dtype=np.int64)
            return PersonalizedStream(self.requirements(), bins, dimensions=self.dimensions)
        return GuardedStream(np.zeros((self.length, self.dimensions)))

    def audit(self, records: Sequence[SpendRecord]) -> tuple[Fraction, tuple[str, ...]]:
        """The independent auditor's worst window / ε and its violations for these records."""
        found = audit_records(
            records,
            self.notion,
            runs=1,
            epsilon=self.epsilon,
            w=self.w,
            classes=[(w, eps) for w, eps, _ in self.classes],
            policies=self.policies,
        )
        return found.worst_ratio, found.violations


Plan = Callable[[int, FloatArray], FloatArray]  # (operation index, natural output) -> the output handed back


@attrs.frozen(eq=False)
class Run:
    """One explored run: the outputs handed back, the records, the auditor's figures, what went wrong."""

    setting: Setting
    outputs: tuple[Any, ...]
    records: tuple[SpendRecord, ...]
    ratio: Fraction  # worst window / ε; for a refused spend, the sum it attempted / ε
    refused: str | None = None  # the ledger's refusal (raised, or caught and swallowed by the mechanism)
    violations: tuple[str, ...] = ()
    error: str | None = None  # the mechanism failed on these outputs
    in_process: bool = False  # the mechanism's own code read true values in its process (isolation='trusted')

    @property
    def violated(self) -> bool:
        return self.refused is not None or bool(self.violations)

    def call(self, reference: str) -> str:
        """Python that replays this run through the real ledger (paste it into a session)."""
        outputs = [_plain(o) if o is not None else None for o in self.outputs]
        return (
            f"from budgetcheck.verify.explore import replay_outputs; "
            f"replay_outputs({reference!r}, {self.setting.to_json()!r}, {outputs!r})"
        )


def _plain(output: FloatArray) -> Any:
    """Nested lists of floats, None where unpaid (NaN): what numpy reads back as the same array."""
    values = np.asarray(output, dtype=np.float64)
    return np.where(np.isnan(values), np.array(None, dtype=object), values.astype(object)).tolist()


def _is_threshold(result: Any) -> bool:
    return isinstance(result, np.ndarray) and result.ndim >= 2 and result.shape[0] == 3


class _Chooser:
    """The verifier tap: hands back the plan's output for each charged operation, keeps a copy."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.outputs: list[Any] = []
        self.previous_starts: dict[tuple[int, ...], FloatArray] = {}

    def __call__(self, result: Any) -> Any:
        if not isinstance(result, np.ndarray):  # spend() returns None: nothing to choose
            self.outputs.append(None)
            return result
        chosen = self.plan(len(self.outputs), np.asarray(result, dtype=np.float64))
        if _is_threshold(result):
            chosen = self._threshold(np.asarray(result, dtype=np.float64), chosen)
        else:
            chosen = np.where(np.isnan(result), np.nan, chosen)  # unpaid entries stay unpaid
        self.outputs.append(chosen.copy())
        return chosen

    def _threshold(self, natural: FloatArray, chosen: FloatArray) -> FloatArray:
        """AboveThreshold's (above, opened, starts): the chosen answer where a cell was tested;
        an instance closes (start 0) after an above answer, else keeps its start."""
        opened = natural[1] != 0.0
        above = (chosen[0] > 0.0) & ~opened
        key = natural.shape
        prior = self.previous_starts.get(key, natural[2])
        starts = np.where(opened, natural[2], np.where(above, 0.0, prior))
        out = np.stack([above.astype(np.float64), natural[1], starts])
        self.previous_starts[key] = starts
        return out


def run_plan(mechanism: Any, setting: Setting, plan: Plan) -> Run:
    """Run ``mechanism`` on the stand-in stream of ``setting`` with the plan's outputs."""
    chooser = _Chooser(plan)
    ledger = setting.ledger()
    install_tap(ledger, chooser)
    error: str | None = None
    refused: str | None = None
    attempted = Fraction(0)
    try:
        execute_on(mechanism, setting.stream(), ledger)
    except BudgetExceeded as exc:
        refused = str(exc)
        attempted = Fraction(exc.window_sum) / Fraction(exc.epsilon)
    except Exception as exc:  # a failure on outputs the ledger can produce: reported, not a violation
        error = f"{type(exc).__name__}: {exc}"
    if refused is None and ledger.refusals:
        refused = (
            f"the mechanism asked for more than a window allows {ledger.refusals} time(s) and swallowed the refusal"
        )
        attempted = Fraction(ledger.worst_refused_ratio)
    records = ledger.records
    ratio, violations = setting.audit(records)
    return Run(
        setting=setting,
        outputs=tuple(chooser.outputs),
        records=records,
        ratio=max(ratio, attempted),
        refused=refused,
        violations=violations,
        error=error,
        in_process=ledger.in_process > 0,
    )


def replay_outputs(reference: Any, setting: dict[str, Any] | Setting, outputs: Sequence[Any]) -> Run:
    """Replay an explored run: ``reference`` (a name for ``load_mechanism`` or a mechanism) on the
    stand-in stream of ``setting`` through the real ledger, each charged operation handing back
    ``outputs`` in order. Returns the run, with the auditor's worst window / ε."""
    from budgetcheck.mechanism.loading import load_mechanism

    mechanism = load_mechanism(reference) if isinstance(reference, str) else reference
    chosen = setting if isinstance(setting, Setting) else Setting.from_json(setting)
    stored = list(outputs)

    def hand_back(k: int, natural: FloatArray) -> FloatArray:
        if k >= len(stored) or stored[k] is None:
            raise InvalidArgument(f"outputs has no array for charged operation {k}: the mechanism took another path")
        return np.array(stored[k], dtype=np.float64).reshape(natural.shape)

    return run_plan(mechanism, chosen, hand_back)


# -- plans ----------------------------------------------------------------------------------------


def bits_plan(bits: Sequence[bool]) -> Plan:
    """Every entry of operation k far above if bits[k] else far below (far below after the bits)."""

    def plan(k: int, natural: FloatArray) -> FloatArray:
        high = k < len(bits) and bits[k]
        return np.full(natural.shape, VALUES[HIGH if high else LOW])

    return plan


def codes_plan(codes: NDArray[np.int64]) -> Plan:
    """Entry j of operation k is VALUES[codes[k % K, j % E]] (per dimension, per operation)."""
    rows, columns = codes.shape

    def plan(k: int, natural: FloatArray) -> FloatArray:
        size = max(1, natural.size)
        row = codes[k % rows]
        picked = row[np.arange(size) % columns]
        if _is_threshold(natural):  # one answer per cell: the last axis of the cells
            per = natural[0].size
            answers = np.asarray(VALUES)[row[np.arange(per) % columns]].reshape(natural[0].shape)
            return np.broadcast_to(answers, natural.shape).copy()
        return np.asarray(np.asarray(VALUES)[picked].reshape(natural.shape), dtype=np.float64)

    return plan


# -- the search -----------------------------------------------------------------------------------


@attrs.frozen
class Budget:
    """How much exploring a profile does: exhaustive depth, then guided runs per (w, d)."""

    tree_depth: int  # binary choices enumerated exhaustively (2^depth leaves at most)
    guided: tuple[tuple[int, int, int], ...]  # (w (or max w_c, max |J|), d, runs) over horizons of 4w
    beam: int = 3

    @property
    def w_max(self) -> int:
        return max(w for w, _, _ in self.guided)


# d = 32 at the largest w: per-dimension decisions (FASTwAsPublished's per-column samples) drift
# apart in some of 32 columns far more often than in some of 8 (about 15 in 16 runs against 8 in
# 16), at the same cost per run for every built-in (their work is vectorised over d).
BUDGETS = {
    "quick": Budget(tree_depth=5, guided=((5, 1, 12), (24, 3, 6), (64, 32, 4))),
    "thorough": Budget(
        tree_depth=10, beam=4, guided=((5, 1, 60), (17, 3, 40), (41, 8, 30), (64, 32, 30), (128, 32, 20), (128, 3, 10))
    ),
}


@attrs.frozen(eq=False)
class Exploration:
    """What the search found: the worst run, the first violating run (if any), and the bound."""

    runs: int
    w_max: int
    horizon: int
    worst: Run | None
    violation: Run | None
    conformance: str | None  # the first step where the charges left the rule, with its run
    conformance_run: Run | None
    errors: tuple[str, ...]
    checked_rule: bool
    seconds: float
    nondeterministic: str | None = None
    undecided: int = 0  # runs whose charges conformance could not follow (too many rule states)
    failed: int = 0  # runs on which the mechanism failed (``errors`` names each distinct failure once)
    vouched: bool = False  # some explored run charged a sensitivity the mechanism vouched for (measure)
    in_process: int = 0  # explored runs in which the mechanism's code read true values here (isolation='trusted')


def small_settings(notion: str) -> Iterator[Setting]:
    """Short horizons and small windows (the exhaustive tree)."""
    if notion == Notion.PERSONALIZED:
        yield Setting(Notion.PERSONALIZED, 4, 2, classes=((1, 0.5, 1), (2, 1.0, 1)))
        yield Setting(Notion.PERSONALIZED, 5, 1, classes=((2, 1.0, 1), (3, 0.5, 1)))
        return
    if notion == Notion.SWELLFISH:
        yield Setting(Notion.SWELLFISH, 5, 1, policies=((1, 3, (1.0,)),))
        yield Setting(Notion.SWELLFISH, 6, 2, policies=((2, 4, (2.0, 1.0)), (1, 2, (1.0,))))
        return
    for w, length, d in ((1, 3, 1), (2, 5, 1), (3, 6, 2)):
        yield Setting(Notion.W_EVENT, length, d, w=w)


def large_settings(notion: str, guided: Sequence[tuple[int, int, int]]) -> Iterator[Setting]:
    """Each (w, d) of ``guided`` over a horizon of 4w (guided search)."""
    for w, d, _ in guided:
        length = 4 * w
        if notion == Notion.PERSONALIZED:
            yield Setting(Notion.PERSONALIZED, length, d, classes=((max(1, w // 4), 0.5, 1), (w, 1.0, 1)))
        elif notion == Notion.SWELLFISH:
            yield Setting(
                Notion.SWELLFISH, length, d, policies=((w, 2 * w - 1, (2.0, 1.0)), (1, max(1, w // 3), (1.0,)))
            )
        else:
            yield Setting(Notion.W_EVENT, length, d, w=w, epsilon=0.5 if w == guided[0][0] else 1.0)


def explore(mechanism: Any, *, profile: str = "quick", seed: int = 0, rule: Any = None) -> Exploration:
    """Search output sequences for each setting; stop at the first violation (see the module docstring).

    With ``rule`` (the mechanism's ``allocation_rule()``), every run is also checked for
    conformance (:func:`budgetcheck.verify.conformance.first_departure`) until the first departure;
    a departure does not stop the search (it means the proof does not cover the code, not that a
    window is over ε: the search goes on for a violation).
    """
    if profile not in BUDGETS:
        raise InvalidArgument(f"profile={profile!r} must be one of {sorted(BUDGETS)}")
    budget = BUDGETS[profile]
    notion = notion_of(mechanism)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    state: dict[str, Any] = {
        "runs": 0,
        "worst": None,
        "w": 0,
        "T": 0,
        "errors": {},
        "failed": 0,
        "undecided": 0,
        "longest": None,
        "vouched": False,
        "in_process": 0,
    }

    def judge(run: Run) -> str | None:
        """ "violation" if this run violated, else None; keeps the tally, the worst run and the first
        departure from the rule."""
        state["runs"] += 1
        state["w"] = max(state["w"], run.setting.window)
        state["T"] = max(state["T"], run.setting.length)
        if run.error is not None:  # each distinct failure once, with the first setting it showed at
            state["failed"] += 1
            state["errors"].setdefault(run.error, f"{run.setting.describe()}: {run.error}")
        state["vouched"] = state["vouched"] or any(record.vouched for record in run.records)
        state["in_process"] += run.in_process
        if state["worst"] is None or run.ratio > state["worst"].ratio:
            state["worst"] = run
        if state["longest"] is None or run.setting.length > state["longest"].setting.length:
            state["longest"] = run
        if rule is not None and "departure" not in state:  # after the first departure, only violations matter
            departure = first_departure(rule, run.setting, run.records)
            if departure == UNDECIDED:
                state["undecided"] += 1
            elif departure is not None:
                state["departure"] = (departure, run)
        return "violation" if run.violated else None

    def finish(violation: Run | None) -> Exploration:
        departure = state.get("departure")
        nondeterministic = _nondeterministic(mechanism, [violation or state["worst"], state["longest"]])
        return Exploration(
            runs=state["runs"],
            w_max=state["w"],
            horizon=state["T"],
            worst=state["worst"],
            violation=violation if violation is not None and violation.violated else None,
            conformance=departure[0] if departure else None,
            conformance_run=departure[1] if departure else None,
            errors=tuple(state["errors"].values()),
            checked_rule=rule is not None,
            undecided=state["undecided"],
            failed=state["failed"],
            vouched=state["vouched"],
            in_process=state["in_process"],
            seconds=time.perf_counter() - start,
            nondeterministic=nondeterministic,
        )

    announced = notion == Notion.W_EVENT and getattr(mechanism, "intrusions", None) == ANNOUNCED
    for setting in small_settings(notion):
        for run in _tree(mechanism, setting.announcing() if announced else setting, budget.tree_depth):
            if judge(run) is not None:
                return finish(run)
    for setting, (_, _, runs) in zip(large_settings(notion, budget.guided), budget.guided, strict=True):
        for run in _guided(mechanism, setting.announcing() if announced else setting, runs, budget, rng):
            if judge(run) is not None:
                return finish(run)
    return finish(None)


def _nondeterministic(mechanism: Any, runs: Sequence[Run | None]) -> str | None:
    """Why a run does not replay to the same charges (unseeded randomness, a clock, state kept
    between runs), or None: exploration judges a mechanism only if its outputs and seed determine
    it. Checked on the worst run and the longest one (where a coin shows over hundreds of steps)."""
    for run in runs:
        if run is None or run.error is not None:
            continue
        try:
            again = replay_outputs(mechanism, run.setting, run.outputs)
        except Exception as exc:
            return f"replaying its own outputs failed ({run.setting.describe()}): {type(exc).__name__}: {exc}"
        if _charges(again.records) != _charges(run.records) or again.ratio != run.ratio:
            return (
                f"the same charged outputs gave other charges on a second run ({run.setting.describe()}; "
                f"worst window {float(again.ratio):.6f} of epsilon, {float(run.ratio):.6f} on the first)"
            )
    return None


def _charges(records: Sequence[SpendRecord]) -> list[tuple[int, str, list[float]]]:
    return [(r.t, r.purpose, np.asarray(r.amounts, dtype=np.float64).ravel().tolist()) for r in records]


def _tree(mechanism: Any, setting: Setting, depth: int) -> Iterator[Run]:
    """Every leaf of the tree of far-below / far-above choices for the first ``depth`` operations
    (later operations far below): a run per distinct branch, each branch met once."""
    pending: list[tuple[bool, ...]] = [()]
    while pending:
        prefix = pending.pop()
        run = run_plan(mechanism, setting, bits_plan(prefix))
        yield run
        made = min(len(run.outputs), depth)
        for i in range(len(prefix), made):
            if run.outputs[i] is not None:
                pending.append(prefix + (False,) * (i - len(prefix)) + (True,))


def _families(setting: Setting, columns: int, rng: np.random.Generator) -> Iterator[NDArray[np.int64]]:
    """Structured code arrays (rows: operations; columns: entries) to start the search from, the
    most telling first: per-column repeats, one steady column, all far above, per-dimension
    phases of about w, opposite alternation, a burst every w, far below / above at random."""
    rows = 4 * setting.length + 8
    span = np.arange(rows)[:, None]
    column = np.arange(columns)[None, :]
    yield _repeats(rows, columns, rng)
    yield np.where(column == 0, 5, np.where((span >> np.minimum(column - 1, 20)) % 2 == 1, HIGH, LOW)).astype(np.int64)
    yield np.full((rows, columns), HIGH, dtype=np.int64)
    yield np.where((span // (2 * setting.window + 1) + column) % 2 == 0, HIGH, LOW).astype(np.int64)
    yield _repeats(rows, columns, rng)
    yield _repeats(rows, columns, rng)
    yield np.where(span % 2 == column % 2, HIGH, LOW).astype(np.int64)
    yield np.where((span % max(2, setting.window)) < 2, HIGH, 2).astype(np.int64)
    yield np.where(rng.random((rows, columns)) < 0.5, HIGH, LOW).astype(np.int64)


def _repeats(rows: int, columns: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """Each column repeats its value and changes it at a rate of its own (0 to every operation):
    steady and jumping columns make per-dimension decisions (e.g. feedback-driven sampling) differ."""
    rates = rng.choice(np.array([0.0, 0.02, 0.1, 0.3, 1.0]), size=columns)
    changes = rng.random((rows, columns)) < rates
    changes[0] = True
    fresh = rng.integers(0, len(VALUES), size=(rows, columns))
    last_change = np.maximum.accumulate(np.where(changes, np.arange(rows)[:, None], 0), axis=0)
    return np.asarray(np.take_along_axis(fresh, last_change, axis=0), dtype=np.int64)


def _mutate(codes: NDArray[np.int64], setting: Setting, rng: np.random.Generator) -> NDArray[np.int64]:
    """A block of operations re-chosen, one column flipped or held steady, or a segment copied elsewhere."""
    child = codes.copy()
    rows, columns = child.shape
    kind = int(rng.integers(0, 4))
    start = int(rng.integers(0, rows))
    length = int(rng.integers(1, max(2, 2 * setting.window)))
    if kind == 0:
        child[start : start + length] = rng.integers(0, len(VALUES), size=child[start : start + length].shape)
    elif kind == 1:
        j = int(rng.integers(0, columns))
        child[start : start + length, j] = HIGH + LOW - child[start : start + length, j].clip(LOW, HIGH)
    elif kind == 2:  # a column held steady
        j = int(rng.integers(0, columns))
        child[start : start + length, j] = child[start, j]
    else:
        source = int(rng.integers(0, rows))
        block = child[source : source + length].copy()
        child[start : start + len(block)] = block[: rows - start]
    return child


def _guided(mechanism: Any, setting: Setting, runs: int, budget: Budget, rng: np.random.Generator) -> Iterator[Run]:
    """``runs`` runs of a beam search on the worst window / ε: structured families, then mutated
    children of the best ``beam`` so far."""
    columns = max(2, setting.dimensions)
    scored: list[tuple[Fraction, int, NDArray[np.int64]]] = []
    families = _families(setting, columns, rng)
    while len(scored) < runs:
        codes = next(families, None)
        if codes is None:
            scored.sort(key=lambda item: (item[0], -item[1]), reverse=True)
            parent = scored[int(rng.integers(0, min(budget.beam, len(scored))))][2]
            codes = _mutate(parent, setting, rng)
        run = run_plan(mechanism, setting, codes_plan(codes))
        yield run
        scored.append((run.ratio, len(scored), codes))
