"""The live path checked against the batch run: ``releases`` must be ``run`` stepped one timestamp at a time.

A publisher (``budgetcheck publish``, :func:`budgetcheck.publish`) drives a mechanism through its
``releases(stream, ledger)`` generator, not ``run``; every other stage of ``verify`` runs ``run``. So a
mechanism whose two paths differ would have its publisher's code unverified. On each replayed case
(w-event, Swellfish, and personalized, whose live rows are the counts per requirement class and bin
as ``publish`` reads them), the case is run both ways on one run with the same seed (reproducible
noise): the live path must charge the same records (timestamp, purpose, amounts, sensitivity, noise
scale, vouched) in the same order and release the same doubles. The built-in mechanisms are written
to meet this bit for bit (``tests/builtin/test_one_run_path.py``); a third party's live path may
compute differently only if it draws and spends exactly as its batch path does. Both ledgers can be
kept where production keeps them (``store``: e.g. a ledger file, as ``publish`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.noise import NUMPY
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.mechanism.execute import execute_on
from budgetcheck.strategies import PersonalizedCase, SwellfishCase, VerificationCase
from budgetcheck.stream.guarded import GuardedStream, PersonalizedStream, class_counts
from budgetcheck.stream.live import LiveStream
from budgetcheck.verify.owner import ledger_flags

FloatArray = NDArray[np.float64]


def has_live_path(mechanism: object) -> bool:
    """Whether the mechanism offers a ``releases`` generator (what a publisher drives)."""
    return callable(getattr(mechanism, "releases", None))


@attrs.frozen
class LivePath:
    """What the live path did on one case: where it departed from ``run`` (None: nowhere), and whether its
    ledger charged a vouched sensitivity or ran the mechanism's code on true values in this process."""

    departure: str | None
    vouched: bool
    in_process: bool


def live_departure(
    mechanism: Any, case: VerificationCase | SwellfishCase | PersonalizedCase, store: Store | None = None
) -> LivePath:
    """Run ``mechanism.releases`` against ``mechanism.run`` on ``case`` (one run, the case's seed): the first
    differing charge or release, or a shortfall, with what the live ledger counted. The ledger's refusals and
    a read of a Secret raise as they do in ``run``. ``store`` keeps both ledgers where production keeps them
    (:func:`budgetcheck.verify.configurations.ledger_file`: each in a fresh ledger file, as ``publish`` does);
    None: in memory, as ``execute`` does."""
    ledger, departure = _stepped(mechanism, case, store or (lambda ledger: ledger))
    return LivePath(departure, vouched=ledger.vouched > 0, in_process=ledger.in_process > 0)


Store = Callable[[LedgerCore], LedgerCore]  # a fresh ledger -> the same ledger, kept where a configuration keeps it


def case_ledger(case: VerificationCase | SwellfishCase | PersonalizedCase, *, runs: int = 1) -> LedgerCore:
    """A fresh ledger of the case's notion and parameters, ``runs`` runs of reproducible noise from its seed
    (what ``execute``, ``execute_personalized`` and ``execute_swellfish`` make)."""
    common: dict[str, Any] = {"runs": runs, "seed": case.seed, "sampler": NUMPY, "keep_records": True, **ledger_flags()}
    if isinstance(case, SwellfishCase):
        return SwellfishLedger(case.policies, epsilon=case.epsilon, **common)
    if isinstance(case, PersonalizedCase):
        return PersonalizedLedger(case.requirements, **common)
    return WindowLedger(WEventParams(epsilon=case.epsilon, w=case.w), **common)


def case_stream(case: VerificationCase | SwellfishCase | PersonalizedCase) -> GuardedStream | PersonalizedStream:
    """The case's stream as ``run`` reads it."""
    if isinstance(case, PersonalizedCase):
        return PersonalizedStream(case.requirements, case.bins, dimensions=case.dimensions)
    return GuardedStream(case.data)


def run_case(mechanism: Any, case: VerificationCase | SwellfishCase | PersonalizedCase, store: Store) -> Any:
    """``run`` on the case (one run per the case's runs), through a ledger kept by ``store``; intrusions
    announced as ``execute`` announces them."""
    ledger = store(case_ledger(case, runs=case.runs))
    if isinstance(case, VerificationCase):
        for t in case.intrusions:
            cast(WindowLedger, ledger).announce_intrusion(t)
    return execute_on(mechanism, case_stream(case), ledger)


def _live_rows(case: VerificationCase | SwellfishCase | PersonalizedCase) -> tuple[FloatArray, int | None]:
    """The rows a live publisher reads: (T, d) counts, or (T, classes, d) counts per requirement class."""
    if isinstance(case, PersonalizedCase):
        r = case.requirements
        counts = class_counts(r.user_classes, np.asarray(case.bins), r.n_classes, case.dimensions, r.class_ranges)
        return np.asarray(counts, dtype=np.float64), r.n_classes
    return np.asarray(case.data, dtype=np.float64), None


def _stepped(
    mechanism: Any, case: VerificationCase | SwellfishCase | PersonalizedCase, store: Store
) -> tuple[LedgerCore, str | None]:
    """The live ledger after stepping ``releases`` over the case, and the first departure from ``run``."""
    one = attrs.evolve(case, runs=1)
    batch = run_case(mechanism, one, store)
    ledger = store(case_ledger(one))
    if isinstance(case, VerificationCase):
        for t in case.intrusions:
            cast(WindowLedger, ledger).announce_intrusion(t)
    batch_ledger: LedgerCore = batch.ledger
    batch_releases = batch.releases
    data, classes = _live_rows(case)
    dimensions = data.shape[-1]
    stream = LiveStream(((t + 1, row) for t, row in enumerate(data)), dimensions=dimensions, classes=classes)
    ledger.bind(stream)
    stepped = 0
    for value in mechanism.releases(stream, ledger):
        if stepped >= data.shape[0]:
            return ledger, f"releases() yielded more than the stream's {data.shape[0]} timestamps"
        row = np.asarray(value, dtype=np.float64)
        expected = batch_releases[:, stepped]
        if row.shape != expected.shape or row.tobytes() != np.ascontiguousarray(expected).tobytes():
            return ledger, (
                f"releases() released {row.tolist()} at t={stepped + 1} where run() released {expected.tolist()} "
                "(same seed, one run)"
            )
        stepped += 1
    if stepped != data.shape[0]:
        return ledger, f"releases() yielded {stepped} of the stream's {data.shape[0]} timestamps"
    return ledger, _first_other_charge(ledger.records, batch_ledger.records)


def _first_other_charge(live: tuple[SpendRecord, ...], batch: tuple[SpendRecord, ...]) -> str | None:
    for index, (mine, theirs) in enumerate(zip(live, batch, strict=False)):
        if _charge(mine) != _charge(theirs):
            return (
                f"releases() charged {_describe(mine)} as charge {index + 1}, where run() charged {_describe(theirs)}"
            )
    if len(live) != len(batch):
        return f"releases() made {len(live)} charges, run() {len(batch)} (same seed, one run)"
    return None


def _charge(record: SpendRecord) -> tuple[object, ...]:
    return (
        record.t,
        record.purpose,
        np.asarray(record.amounts).tobytes(),
        record.sensitivity,
        None if record.noise_scale is None else np.asarray(record.noise_scale).tobytes(),
        record.vouched,
    )


def _describe(record: SpendRecord) -> str:
    amounts = np.asarray(record.amounts).tolist()
    vouched = ", vouched" if record.vouched else ""
    return f"t={record.t} {record.purpose!r} {amounts} at sensitivity {record.sensitivity!r}{vouched}"
