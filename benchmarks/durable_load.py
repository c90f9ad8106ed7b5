"""Load and scale of durable ledgers (issue: durable ledger).

1. Committed spends per second on one ledger file (one transaction per spend) by N = 1, 2, 4 writer
   processes, durability 'full' (fsync per commit) and 'process', against the same spends on an
   in-memory ledger; the ratio process / full per N (the README quotes it).
2. A long stream (a spend at every t) through an in-memory WindowLedger (keeping no records, the
   default) and through a ledger file: the process's resident memory (and its peak) at every tenth
   of the stream must stay flat.
3. Auditing a ledger file of N records (written in bulk with the same hash chain), in seconds.
4. SIGKILL-and-restart of `budgetcheck publish` at random points (see tests/durable/test_publish.py).
5. The concurrency campaign (budgetcheck.durable.campaign): N = 2, 4, 8 processes spending on the
   newest timestamp of one file, both durability modes; every window audited after each run.
6. A shared ledger: committed spends/s of N = 1, 2, 4 writer processes on one PostgreSQL ledger (a
   server started by pgserver, if it is installed) and, for comparison, on one SQLite file.
7. The server-crash campaign (budgetcheck.durable.server_crash): `budgetcheck publish` on a PostgreSQL
   ledger, the server crashed mid-publish (pg_ctl stop -m immediate, SIGKILL of the postmaster) and
   restarted, for every durability mode and both outputs: double releases, lost commits, audit.

    python benchmarks/durable_load.py [--quick] [--stream N] [--file-stream N] [--writer-spends S] [--rate-rounds R]
                                      [--audit N] [--kills K] [--campaign-runs R] [--shared-spends N] [--only-shared]
                                      [--server-crashes C] [--only-server-crash]
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

import budgetcheck as bc
from budgetcheck.durable.campaign import run_campaign
from budgetcheck.durable.journal import RECORD_VERSION, SPEND, encode_detail, genesis, row_hash

_RATE_FILES = itertools.count()


def _rate_ledger() -> bc.WindowLedger:
    return bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace")


def _writer(path: str, durability: str, spends: int, amount: float, start: Any, results: Any) -> None:
    """One writer process: ``spends`` spends of ``amount`` at its newest known timestamp, each its own transaction."""
    ledger = bc.open_ledger(path, _rate_ledger(), durability=durability)
    accepted = stale = 0
    start.wait()
    for k in range(spends):
        try:
            ledger.spend(max(ledger.t, k + 1), amount, purpose="load")
            accepted += 1
        except bc.TimestampOrder:  # another writer moved on between our read of t and our lock
            stale += 1
    ledger.close()
    results.put((accepted, stale))


def spends_per_second(folder: Path, durability: str, writers: int, spends: int) -> tuple[float, int]:
    """Committed spends per second of ``writers`` processes on one fresh file (``spends`` each; wall
    time from the common start to the last writer's end), and how many spends were stale."""
    path = str(folder / f"rate-{durability}-{writers}-{next(_RATE_FILES)}.db")  # a fresh file each time
    amount = 0.9 / (writers * spends)  # every spend fits: the rate measured is that of commits, not refusals
    bc.open_ledger(path, _rate_ledger(), durability=durability).close()
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    workers = [
        context.Process(target=_writer, args=(path, durability, spends, amount, start, results)) for _ in range(writers)
    ]
    for process in workers:
        process.start()
    time.sleep(0.5)  # every writer has opened the file and waits
    began = time.perf_counter()
    start.set()
    reports = [results.get(timeout=3600) for _ in workers]
    seconds = time.perf_counter() - began
    for process in workers:
        process.join(timeout=60)
    report = bc.audit_file(path)
    if not report.ok or report.records != sum(accepted for accepted, _ in reports):
        raise SystemExit(f"the rate file {path} fails its audit or lost spends: {report}")
    return sum(accepted for accepted, _ in reports) / seconds, sum(stale for _, stale in reports)


def in_memory_rate(n: int) -> float:
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace")
    start = time.perf_counter()
    for t in range(1, n + 1):
        ledger.spend(t, 0.009, purpose="load")
    return n / (time.perf_counter() - start)


def long_stream(folder: Path | None, length: int, w: int) -> list[tuple[int, float, float, float]]:
    """(t, resident MiB, peak resident MiB, seconds) at every tenth of a spend at every t through a
    ledger file (or, ``folder`` None, an in-memory ledger keeping no records: the library's default)."""
    ledger = bc.WindowLedger(bc.WEventParams(1.0, w), sampler="numpy-laplace")
    if folder is not None:
        ledger = bc.open_ledger(folder / "long.db", ledger, durability="process")
    checkpoints = sorted({length // 10 * k for k in range(1, 11)} | {length})
    points = []
    start = time.perf_counter()
    amount = 0.9 / w
    for t in range(1, length + 1):
        ledger.spend(t, amount, purpose="s")
        if t in checkpoints:
            points.append((t, _rss_mib(), _peak_mib(), time.perf_counter() - start))
    ledger.close()
    return points


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _peak_mib() -> float:
    """The process's peak resident set so far (ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def bulk_file(path: Path, n: int, w: int) -> None:
    """A valid ledger file of n records (one spend of 1/w per timestamp), chained like the real writer."""
    ledger = bc.open_ledger(
        path, bc.WindowLedger(bc.WEventParams(1.0, w), sampler="numpy-laplace"), durability="process"
    )
    header, sampler = ledger.header(), ledger.sampler
    ledger.close()
    record = bc.SpendRecord(t=1, purpose="bulk", amounts=np.array([0.9 / w]))
    amounts = np.ascontiguousarray(record.amounts, dtype="<f8").tobytes()
    detail = encode_detail(record)
    text = detail.decode()
    previous = genesis(header, sampler)  # a file keeps its sampler in the chain's start
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    batch = []
    for seq in range(1, n + 1):
        previous = row_hash(previous, RECORD_VERSION, SPEND, seq, seq, seq, amounts, detail, None)
        batch.append((seq, RECORD_VERSION, SPEND, seq, seq, amounts, text, None, previous))
        if len(batch) == 100_000:
            db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
            batch.clear()
    db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
    db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument(
        "--stream", type=int, default=None, help="length of the in-memory long stream (default 10^7, quick 2*10^5)"
    )
    parser.add_argument(
        "--file-stream",
        type=int,
        default=None,
        help="length of the long stream through a ledger file (default 10^7, quick 5*10^4)",
    )
    parser.add_argument(
        "--writer-spends",
        type=int,
        default=None,
        help="spends per writer in the rate section (default 5,000, quick 200)",
    )
    parser.add_argument(
        "--rate-rounds",
        type=int,
        default=None,
        help="rounds of the rate section, full and process interleaved (default 5, quick 1)",
    )
    parser.add_argument(
        "--audit", type=int, default=None, help="records in the audited file (default 10^7, quick 10^5)"
    )
    parser.add_argument("--kills", type=int, default=None, help="kill points of the crash test (default 100, quick 5)")
    parser.add_argument(
        "--campaign-runs",
        type=int,
        default=None,
        help="runs per (N, durability) of the concurrency campaign (default 17, i.e. 102 in all; quick 1)",
    )
    parser.add_argument(
        "--shared-spends",
        type=int,
        default=None,
        help="spends per writer in section 6 (default 2000, quick 300; 0 skips it)",
    )
    parser.add_argument("--only-shared", action="store_true", help="run section 6 only")
    parser.add_argument(
        "--server-crashes",
        type=int,
        default=None,
        help="server crashes per trial of section 7 (default 3 over 400 timestamps, 8 trials; quick 1 over 60 in "
        "2 trials, one per durability mode; 0 skips it)",
    )
    parser.add_argument("--only-server-crash", action="store_true", help="run section 7 only")
    args = parser.parse_args()
    shared_spends = args.shared_spends if args.shared_spends is not None else (300 if args.quick else 2000)
    crashes = args.server_crashes if args.server_crashes is not None else (1 if args.quick else 3)
    if args.only_shared:
        with tempfile.TemporaryDirectory() as tmp:
            shared(Path(tmp), shared_spends)
        return
    if args.only_server_crash:
        with tempfile.TemporaryDirectory() as tmp:
            server_crash(Path(tmp), crashes, quick=args.quick)
        return
    stream = args.stream or (2 * 10**5 if args.quick else 10**7)
    file_stream = args.file_stream or (5 * 10**4 if args.quick else 10**7)
    audited = args.audit or (10**5 if args.quick else 10**7)
    kills = args.kills if args.kills is not None else (5 if args.quick else 100)
    rate_n = args.writer_spends or (200 if args.quick else 5000)
    w = 10**4
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for where, length in (("in memory", stream), ("ledger file", file_stream)):
            points = long_stream(None if where == "in memory" else folder, length, w)
            for t, mib, peak, seconds in points:
                print(
                    f"long stream ({where}) w={w}: t={t:>10,}  resident {mib:7.1f} MiB  peak {peak:7.1f} MiB  "
                    f"{seconds:8.1f} s"
                )
            (t1, m1, p1, _), (t5, m5, p5, _), (tn, mn, pn, _) = points[0], points[len(points) // 2 - 1], points[-1]
            print(
                f"resident memory ({where}): t={t1:,} -> {t5:,} -> {tn:,}: {m1:.1f} -> {m5:.1f} -> {mn:.1f} MiB "
                f"({mn - m1:+.1f} MiB from N/10 to N, {mn - m5:+.1f} from N/2 to N); "
                f"peak {p1:.1f} -> {p5:.1f} -> {pn:.1f} MiB"
            )
        in_memory_rate(200)  # compiles the kernels outside the measurement
        memory = in_memory_rate(rate_n)
        print(f"in-memory ledger: {memory:,.0f} spends/s ({rate_n} spends)")
        rates(folder, rate_n, args.rate_rounds or (1 if args.quick else 5))
        start = time.perf_counter()
        report = bc.audit_file(folder / "long.db")
        print(
            f"audit of the long stream's own file ({report.records:,} records): {time.perf_counter() - start:.1f} s, "
            f"ok={report.ok}"
        )
        (folder / "long.db").unlink()
        path = folder / "audit.db"
        bulk_file(path, audited, w)
        start = time.perf_counter()
        report = bc.audit_file(path)
        seconds = time.perf_counter() - start
        print(
            f"audit of {audited:,} records: {seconds:.1f} s, ok={report.ok}, worst {float(report.worst_ratio):.4f} of "
            "epsilon"
        )
        start = time.perf_counter()  # the whole chain and every row's values (issue 42, item 5)
        bc.open_ledger(path, bc.WindowLedger(bc.WEventParams(1.0, w), sampler="numpy-laplace")).close()
        print(f"open_ledger of {audited:,} records (chain and every row checked): {time.perf_counter() - start:.2f} s")
        if kills:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "durable"))
            from test_publish import kill_and_restart

            crash = folder / "crash"
            crash.mkdir()
            start = time.perf_counter()
            kill_and_restart(crash, kills=kills, n=max(200, 3 * kills), seed=7)
            print(
                f"kill-and-restart: {kills} SIGKILLs at random points, then a full run: every timestamp released once, "
                f"audit ok ({time.perf_counter() - start:.0f} s)"
            )
        campaign_runs = args.campaign_runs if args.campaign_runs is not None else (1 if args.quick else 17)
        if campaign_runs:
            campaign(folder, campaign_runs)
        if shared_spends:
            shared(folder, shared_spends)
        rewrite_campaign(folder, 10**5 if args.quick else 10**6)
        if crashes:
            server_crash(folder, crashes, quick=args.quick)


def server_crash(folder: Path, crashes: int, *, quick: bool) -> None:
    """Section 7: the server-crash campaign, every durability mode ``publish`` offers."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver  # noqa: F401 — only whether it is installed
    except ImportError:
        print("server-crash campaign: skipped (pip install pgserver 'budgetcheck[postgres]' to run it)")
        return
    from budgetcheck.durable import server_crash as campaign_of

    totals = [0, 0, 0, 0]  # trials, double releases, lost commits, failed audits
    quick_trials = (0, 7)  # full/immediate/--out and process/sigkill/stdout
    (folder / "server-crash").mkdir()
    trials = campaign_of.campaign(
        folder / "server-crash",
        timestamps=60 if quick else 400,
        crashes=crashes,
        chosen=quick_trials if quick else None,
    )
    for trial in trials:
        totals = [
            totals[0] + 1,
            totals[1] + trial.double_releases,
            totals[2] + trial.lost_commits,
            totals[3] + (not trial.audit_ok),
        ]
        print(
            f"server crash {trial.durability:>7} {trial.crash:>9} --{trial.output:<6}: {trial.crashes} crashes, "
            f"{trial.runs} runs, {trial.written} lines written, {trial.stored}/{trial.timestamps} stored, "
            f"{trial.double_releases} double releases, {trial.lost_commits} lost commits, "
            f"audit {'ok' if trial.audit_ok else 'FAILED'} ({trial.seconds:.1f} s)"
        )
    print(
        f"server-crash campaign: {totals[0]} trials x {crashes} crashes: {totals[1]} double releases, "
        f"{totals[2]} lost commits, {totals[3]} failed audits"
    )


def _shared_writer(
    target: str,
    durability: str,
    n: int,
    start: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[float],
) -> None:
    ledger = bc.open_ledger(
        target, bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), durability=durability
    )
    start.wait()
    began = time.perf_counter()
    for _ in range(n):
        ledger.spend(
            1, 1e-6, purpose="shared"
        )  # every writer on one timestamp: each commit serialised with the others'
    results.put(time.perf_counter() - began)
    ledger.close()


def shared_rate(target: str, writers: int, durability: str, n: int) -> float:
    """Committed spends/s of ``writers`` forked processes making ``n`` spends each on one ledger."""
    bc.open_ledger(
        target, bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), durability=durability
    ).close()
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_shared_writer, args=(target, durability, n, start, results)) for _ in range(writers)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # every writer connected and waiting
    start.set()
    slowest = max(results.get(timeout=600) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    report = bc.audit_file(target)
    assert report.ok and report.records == writers * n, report
    return writers * n / slowest


def shared(folder: Path, n: int) -> None:
    """Section 6: one ledger, N = 1, 2, 4 writers, on SQLite and (if pgserver is installed) PostgreSQL."""
    targets: list[tuple[str, object]] = [("sqlite", lambda: str(folder / f"shared-{uuid.uuid4().hex}.db"))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        print("shared ledger on PostgreSQL: skipped (pip install pgserver 'budgetcheck[postgres]' to measure it)")
    else:
        from budgetcheck.durable.postgres import with_ledger

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            url = str(pgserver.get_server(folder / "pg", cleanup_mode="stop").get_uri())
        targets.append(("postgresql", lambda: with_ledger(url, f"bench_{uuid.uuid4().hex[:12]}")))
    for store, fresh in targets:
        for durability in ("process", "full"):
            for writers in (1, 2, 4):
                rate = shared_rate(fresh(), writers, durability, n)  # type: ignore[operator]
                print(
                    f"shared ledger {store:>10} {durability:>7} N={writers}: {rate:,.0f} committed spends/s "
                    f"({writers} x {n} spends, audit ok)"
                )


def rates(folder: Path, spends: int, rounds: int) -> None:
    """Section 1: for N = 1, 2, 4 writers, ``rounds`` rounds of 'full' then 'process' (interleaved, so that
    both see the same disk and load); per N the median rates and the median and range of the per-round
    ratio process / full (an fsync's latency varies a lot with what else uses the disk)."""
    for writers in (1, 2, 4):
        measured: dict[str, list[float]] = {"full": [], "process": []}
        ratios = []
        stale = 0
        for _ in range(rounds):
            for durability in ("full", "process"):
                rate, late = spends_per_second(folder, durability, writers, spends)
                measured[durability].append(rate)
                stale += late
            ratios.append(measured["process"][-1] / measured["full"][-1])
        print(
            f"committed spends/s, N={writers} writer(s) x {spends} spends, {rounds} round(s): "
            f"full {statistics.median(measured['full']):,.0f} "
            f"(range {min(measured['full']):,.0f}-{max(measured['full']):,.0f}), "
            f"process {statistics.median(measured['process']):,.0f} "
            f"(range {min(measured['process']):,.0f}-{max(measured['process']):,.0f}); {stale} stale"
        )
        print(
            f"N={writers}: durability process / full = {statistics.median(ratios):.1f}x median "
            f"(rounds {', '.join(f'{r:.1f}' for r in ratios)})"
        )


def campaign(folder: Path, runs: int) -> None:
    """Section 5: every (N, durability) pair for ``runs`` runs; one line each, then the totals."""
    total = over = 0
    worst = Fraction(0)
    for writers in (2, 4, 8):
        for durability in ("process", "full"):
            start = time.perf_counter()
            result = run_campaign(folder, writers=writers, durability=durability, runs=runs, spends=40, seed=writers)
            total += result.runs
            over += result.worst_ratio > 1
            worst = max(worst, result.worst_ratio)
            print(
                f"campaign N={writers} {durability:>7}: {result.runs} runs, {result.accepted:,} spends accepted, "
                f"{result.refused:,} refused for the budget, {result.stale:,} stale; worst window "
                f"{float(result.worst_ratio):.6f} "
                f"of epsilon; failed audits {result.failed_audits}, lost {result.lost}, phantom {result.phantom}, "
                f"writer errors {len(result.errors)} ({time.perf_counter() - start:.0f} s)"
            )
    print(
        f"campaign: {total} runs, worst window / epsilon = {worst} ({float(worst):.6f}), configurations over epsilon: "
        f"{over}"
    )


def rewrite_campaign(folder: Path, records: int) -> None:
    """Section 7, signed checkpoints (issue 42, item 4): every rewrite of tests/durable/test_checkpoints.py
    (REWRITES) on an SQLite file, found or not by the plain audit, ``audit --key`` (verify_checkpoints and
    the chain) and ``open_ledger(verify_key=...)``; the cost of signing per spend; reopening a ledger of
    ``records`` rows (a checkpoint every 100) with the whole chain (no key) and from its last checkpoint."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "durable"))
    import test_checkpoints as rewrites

    from budgetcheck.durable.checkpoint import Checkpoints
    from budgetcheck.durable.journal import open_store

    private, public = folder / "sign.key", folder / "sign.pub"
    bc.generate_keys(private, public)
    stores: list[tuple[str, Any]] = [("sqlite", lambda: str(folder / f"rewrite-{uuid.uuid4().hex}.db"))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            url = str(pgserver.get_server(folder / "pg-sign", cleanup_mode="stop").get_uri())
        from budgetcheck.durable.postgres import with_ledger

        stores.append(("postgresql", lambda: with_ledger(url, f"sign_{uuid.uuid4().hex[:12]}")))
    except ImportError:
        print("rewrite campaign on PostgreSQL: skipped (pip install pgserver 'budgetcheck[postgres]')")
    runs = plain = with_key = at_open = 0
    for store, fresh in stores:
        for name, (rewrite, _) in rewrites.REWRITES.items():
            target = fresh()
            rewrites.signed_ledger(target, private)
            rewrite(target)
            passed = bc.audit_file(target).ok
            try:
                bc.verify_checkpoints(target, public)
                keyed = not passed
            except bc.LedgerCorrupt:
                keyed = True
            opener = bc.WindowLedger(epsilon=100.0, w=4) if "epsilon" in name else bc.WindowLedger(rewrites.PARAMS)
            try:
                bc.open_ledger(target, opener, verify_key=public).close()
                opened = False
            except bc.LedgerCorrupt:
                opened = True
            runs += 1
            plain, with_key, at_open = plain + (not passed), with_key + keyed, at_open + opened
            print(
                f"rewrite {store:>10} {name:<42} plain audit {'found' if not passed else 'passed'}, audit --key "
                f"{'found' if keyed else 'PASSED'}, open_ledger(verify_key) {'found' if opened else 'OPENED'}"
            )
    print(
        f"rewrite campaign: {runs} rewrites ({len(rewrites.REWRITES)} kinds x {len(stores)} stores) by a store holder "
        f"without the key: plain audit found {plain}, audit --key {with_key}, open_ledger(verify_key) {at_open}"
    )
    spends = 2000
    for every, key in ((None, None), (100, private), (1, private)):
        target = folder / f"cost-{uuid.uuid4().hex}.db"
        extra: dict[str, Any] = {} if key is None else {"signing_key": key, "checkpoint_every": every}
        ledger = bc.open_ledger(target, _rate_ledger(), durability="process", **extra)
        start = time.perf_counter()
        for t in range(1, spends + 1):
            ledger.spend(t, 0.009, purpose="s")
        seconds = time.perf_counter() - start
        ledger.close()
        shown = "no key" if key is None else f"a checkpoint every {every} record(s)"
        print(f"signing cost: {spends} spends, durability process, {shown}: {spends / seconds:,.0f} spends/s")
    path = folder / "reopen.db"
    bulk_file(path, records, 100)
    signer = Checkpoints(signing_key=private, every=100)
    store = open_store(path)
    store.begin_write()
    previous = None
    for count, digest in store.execute("SELECT seq, hash FROM records WHERE seq % 100 = 0 ORDER BY seq").fetchall():
        previous = signer.sign(store, count, bytes(digest), stop=False, previous=previous)
    store.commit()
    store.close()
    timings: dict[str, list[float]] = {"whole chain (no key)": [], "from the last checkpoint (verify_key)": []}
    for _ in range(3):
        for how, extra in zip(timings, ({}, {"verify_key": public}), strict=True):
            start = time.perf_counter()
            bc.open_ledger(path, bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), **extra).close()
            timings[how].append(time.perf_counter() - start)
    for how, seconds in timings.items():
        print(
            f"reopen of {records:,} records, {records // 100:,} checkpoints, w=100, {how}: "
            f"{statistics.median(seconds):.3f} s median of 3"
        )
    start = time.perf_counter()
    report = bc.verify_checkpoints(path, public)
    print(
        f"verify_checkpoints (audit --key's extra work, every signature) of {report.checkpoints:,} checkpoints: "
        f"{time.perf_counter() - start:.3f} s"
    )


if __name__ == "__main__":
    main()
