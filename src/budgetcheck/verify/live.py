"""The live path checked against the batch run: ``releases`` must be ``run`` stepped one timestamp at a time.

A publisher (``budgetcheck publish``, :func:`budgetcheck.publish`) drives a mechanism through its
``releases(stream, ledger)`` generator, not ``run``; every other stage of ``verify`` runs ``run``. So a
mechanism whose two paths differ would have its publisher's code unverified. On each replayed case,
the case is run both ways on one run with the same seed (reproducible noise): the live path must
charge the same records (timestamp, purpose, amounts, sensitivity, noise scale, vouched) in the same
order and release the same doubles. The built-in mechanisms are written to meet this bit for bit
(``tests/builtin/test_one_run_path.py``); a third party's live path may compute differently only if
it draws and spends exactly as its batch path does.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.noise import NUMPY
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.mechanism.execute import execute, execute_swellfish
from budgetcheck.strategies import SwellfishCase, VerificationCase
from budgetcheck.stream.live import LiveStream
from budgetcheck.verify.owner import ledger_flags


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


def live_departure(mechanism: Any, case: VerificationCase | SwellfishCase) -> LivePath:
    """Run ``mechanism.releases`` against ``mechanism.run`` on ``case`` (one run, the case's seed): the first
    differing charge or release, or a shortfall, with what the live ledger counted. The ledger's refusals and
    a read of a Secret raise as they do in ``run``."""
    ledger, departure = _stepped(mechanism, case)
    return LivePath(departure, vouched=ledger.vouched > 0, in_process=ledger.in_process > 0)


def _stepped(mechanism: Any, case: VerificationCase | SwellfishCase) -> tuple[LedgerCore, str | None]:
    """The live ledger after stepping ``releases`` over the case, and the first departure from ``run``."""
    if isinstance(case, SwellfishCase):
        batch = execute_swellfish(
            mechanism, case.policies, case.data, epsilon=case.epsilon, runs=1, seed=case.seed, **ledger_flags()
        )
        ledger: LedgerCore = SwellfishLedger(
            case.policies,
            epsilon=case.epsilon,
            runs=1,
            seed=case.seed,
            sampler=NUMPY,
            keep_records=True,
            **ledger_flags(),
        )
        batch_ledger: LedgerCore = batch.ledger
        batch_releases = batch.releases
    else:
        ran = execute(
            mechanism,
            case.data,
            epsilon=case.epsilon,
            w=case.w,
            runs=1,
            seed=case.seed,
            intrusions=case.intrusions,
            **ledger_flags(),
        )
        window = WindowLedger(
            WEventParams(epsilon=case.epsilon, w=case.w),
            runs=1,
            seed=case.seed,
            sampler=NUMPY,
            keep_records=True,
            **ledger_flags(),
        )
        for t in case.intrusions:
            window.announce_intrusion(t)
        ledger, batch_ledger, batch_releases = window, ran.ledger, ran.releases
    data = np.asarray(case.data, dtype=np.float64)
    stream = LiveStream(((t + 1, row) for t, row in enumerate(data)), dimensions=data.shape[1])
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
