"""Load and scale of durable ledgers (issue: durable ledger).

1. Committed spends per second on a ledger file (one transaction per spend), durability 'full'
   (fsync per commit) and 'process', against the same spends on an in-memory ledger.
2. A long stream through a ledger with records kept on disk: peak memory (tracemalloc) at growing
   stream lengths must stay flat.
3. Auditing a ledger file of N records (written in bulk with the same hash chain), in seconds.
4. SIGKILL-and-restart of `budgetcheck publish` at random points (see tests/test_publish.py).
5. The concurrency campaign (budgetcheck.durable.campaign): N = 2, 4, 8 processes spending on the
   newest timestamp of one file, both durability modes; every window audited after each run.
6. A shared ledger: committed spends/s of N = 1, 2, 4 writer processes on one PostgreSQL ledger (a
   server started by pgserver, if it is installed) and, for comparison, on one SQLite file.

    python benchmarks/durable_load.py [--quick] [--stream N] [--audit N] [--kills K] [--campaign-runs R]
                                      [--shared-spends N] [--only-shared]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sqlite3
import sys
import tempfile
import time
import uuid
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np

import budgetcheck as bc
from budgetcheck.durable.campaign import run_campaign
from budgetcheck._journal import RECORD_VERSION, SPEND, encode_detail, genesis, row_hash


def spends_per_second(folder: Path, durability: str, n: int) -> float:
    ledger = bc.open_ledger(folder / f"rate-{durability}.db", bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), durability=durability)
    start = time.perf_counter()
    for t in range(1, n + 1):
        ledger.spend(t, 0.009, purpose="load")
    rate = n / (time.perf_counter() - start)
    ledger.close()
    return rate


def in_memory_rate(n: int) -> float:
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace")
    start = time.perf_counter()
    for t in range(1, n + 1):
        ledger.spend(t, 0.009, purpose="load")
    return n / (time.perf_counter() - start)


def long_stream(folder: Path | None, length: int, w: int) -> list[tuple[int, float, float]]:
    """(t, resident MiB, seconds) at checkpoints of a spend at every t through a ledger file (or,
    ``folder`` None, an in-memory ledger keeping no records: the library's default)."""
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
            points.append((t, _rss_mib(), time.perf_counter() - start))
    ledger.close()
    return points


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def bulk_file(path: Path, n: int, w: int) -> None:
    """A valid ledger file of n records (one spend of 1/w per timestamp), chained like the real writer."""
    ledger = bc.open_ledger(path, bc.WindowLedger(bc.WEventParams(1.0, w), sampler="numpy-laplace"), durability="process")
    header = ledger.header()
    ledger.close()
    record = bc.SpendRecord(t=1, purpose="bulk", amounts=np.array([0.9 / w]))
    amounts = np.ascontiguousarray(record.amounts, dtype="<f8").tobytes()
    detail = encode_detail(record)
    text = detail.decode()
    previous = genesis(header)
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
    parser.add_argument("--stream", type=int, default=None, help="length of the long stream (default 10^7, quick 10^5)")
    parser.add_argument("--audit", type=int, default=None, help="records in the audited file (default 10^7, quick 10^5)")
    parser.add_argument("--kills", type=int, default=None, help="kill points of the crash test (default 100, quick 5)")
    parser.add_argument("--campaign-runs", type=int, default=None,
                        help="runs per (N, durability) of the concurrency campaign (default 17, i.e. 102 in all; quick 1)")
    parser.add_argument("--shared-spends", type=int, default=None,
                        help="spends per writer in section 6 (default 2000, quick 300; 0 skips it)")
    parser.add_argument("--only-shared", action="store_true", help="run section 6 only")
    args = parser.parse_args()
    shared_spends = args.shared_spends if args.shared_spends is not None else (300 if args.quick else 2000)
    if args.only_shared:
        with tempfile.TemporaryDirectory() as tmp:
            shared(Path(tmp), shared_spends)
        return
    stream = args.stream or (10**5 if args.quick else 10**7)
    audited = args.audit or (10**5 if args.quick else 10**7)
    kills = args.kills if args.kills is not None else (5 if args.quick else 100)
    rate_n = 2000 if args.quick else 20000
    w = 10**4
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        memory = in_memory_rate(rate_n)
        for durability in ("full", "process"):
            rate = spends_per_second(folder, durability, rate_n)
            print(f"committed spends/s, durability={durability}: {rate:,.0f} (in-memory ledger: {memory:,.0f}/s; {rate_n} spends)")
        for where in ("in memory", "ledger file"):
            points = long_stream(None if where == "in memory" else folder, stream, w)
            for t, mib, seconds in points:
                print(f"long stream ({where}) w={w}: t={t:>10,}  resident {mib:7.1f} MiB  {seconds:8.1f} s")
            growth = points[-1][1] - points[0][1]
            print(f"resident memory ({where}) from t={points[0][0]:,} to t={points[-1][0]:,}: {growth:+.1f} MiB")
        start = time.perf_counter()
        report = bc.audit_file(folder / "long.db")
        print(f"audit of the long stream's own file ({report.records:,} records): {time.perf_counter() - start:.1f} s, ok={report.ok}")
        (folder / "long.db").unlink()
        path = folder / "audit.db"
        bulk_file(path, audited, w)
        start = time.perf_counter()
        report = bc.audit_file(path)
        seconds = time.perf_counter() - start
        print(f"audit of {audited:,} records: {seconds:.1f} s, ok={report.ok}, worst {float(report.worst_ratio):.4f} of epsilon")
        if kills:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from test_publish import kill_and_restart

            crash = folder / "crash"
            crash.mkdir()
            start = time.perf_counter()
            kill_and_restart(crash, kills=kills, n=max(200, 3 * kills), seed=7)
            print(f"kill-and-restart: {kills} SIGKILLs at random points, then a full run: every timestamp released once, "
                  f"audit ok ({time.perf_counter() - start:.0f} s)")
        campaign_runs = args.campaign_runs if args.campaign_runs is not None else (1 if args.quick else 17)
        if campaign_runs:
            campaign(folder, campaign_runs)
        if shared_spends:
            shared(folder, shared_spends)


def _shared_writer(target: str, durability: str, n: int, start: multiprocessing.synchronize.Event,
                   results: multiprocessing.queues.Queue[float]) -> None:
    ledger = bc.open_ledger(target, bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), durability=durability)
    start.wait()
    began = time.perf_counter()
    for _ in range(n):
        ledger.spend(1, 1e-6, purpose="shared")  # every writer on one timestamp: each commit serialised with the others'
    results.put(time.perf_counter() - began)
    ledger.close()


def shared_rate(target: str, writers: int, durability: str, n: int) -> float:
    """Committed spends/s of ``writers`` forked processes making ``n`` spends each on one ledger."""
    bc.open_ledger(target, bc.WindowLedger(bc.WEventParams(1.0, 100), sampler="numpy-laplace"), durability=durability).close()
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    processes = [context.Process(target=_shared_writer, args=(target, durability, n, start, results)) for _ in range(writers)]
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
                print(f"shared ledger {store:>10} {durability:>7} N={writers}: {rate:,.0f} committed spends/s "
                      f"({writers} x {n} spends, audit ok)")


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
            print(f"campaign N={writers} {durability:>7}: {result.runs} runs, {result.accepted:,} spends accepted, "
                  f"{result.refused:,} refused for the budget, {result.stale:,} stale; worst window {float(result.worst_ratio):.6f} "
                  f"of epsilon; failed audits {result.failed_audits}, lost {result.lost}, phantom {result.phantom}, "
                  f"writer errors {len(result.errors)} ({time.perf_counter() - start:.0f} s)")
    print(f"campaign: {total} runs, worst window / epsilon = {worst} ({float(worst):.6f}), configurations over epsilon: {over}")


if __name__ == "__main__":
    main()
