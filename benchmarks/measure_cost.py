"""Cost per call of ``ledger.measure``: isolated (a sandboxed process forked per call and held to its
deadline, the default) against in-process (``isolation='trusted'``), and against ``laplace_query`` (the
vocabulary: no fn at all).

One run each, in one process, on histograms of d = 100 bins; ``--ballast`` grows the parent's heap
first (a fork copies the page tables, so its cost grows with the process). Run:

    python benchmarks/measure_cost.py            # 2,000 calls per configuration
    python benchmarks/measure_cost.py --quick    # 200
    python benchmarks/measure_cost.py --quick --deadline 0.03   # how short a deadline still answers

Measured before the sandbox (2 shared cores, load about 3, budgetcheck with its verifier imports loaded:
111 MB): isolated 10.0-13.0 ms per call, trusted 0.08-0.09 ms (about 130x), laplace_query 0.08 ms; a bare
fork + _exit + waitpid of the same process costs 4.5 ms (0.8 ms before any import). Since issue 43 an
isolated call takes its deadline, by design (the default 0.25 s: see
docs/explanation/predictable-transactions.md); what runs inside it (fork, sandbox, fn) is what a shorter
``--deadline`` shows, with the calls that did not answer in time. No built-in calls measure (DSATw's row
count is a query). With it, at a load of about 11: before 67.7 ms per isolated call, after 267.0 ms
(deadline 0.25 s, 0 of 200 defaults); --deadline 0.05: 97.2 ms, 125 of 200 defaults.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from budgetcheck import GuardedStream, Total, WindowLedger, rounding
from budgetcheck.ledger.isolation import DEFAULT_DEADLINE


def _per_call(calls: int, d: int, how: str, deadline: float) -> tuple[float, int]:
    stream = GuardedStream(np.ones((calls, d)))
    # the owner's consent to vouched sensitivities and (for "trusted") in-process code
    ledger = WindowLedger(epsilon=1.0, w=calls, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    budget = rounding.share(1.0, calls)  # rounded down: the calls fit the window exactly
    start = time.perf_counter()
    for secret in stream:
        if how == "query":
            ledger.laplace_query(secret, Total(), budget)
        else:
            ledger.measure(np.sum, secret, sensitivity=1.0, epsilon=budget, isolation=how, deadline=deadline)
    return (time.perf_counter() - start) / calls, len(ledger.failures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ballast", type=int, default=0, help="MiB of heap to allocate (and touch) before measuring")
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE, help="seconds per isolated call")
    args = parser.parse_args()
    calls = 200 if args.quick else 2000
    ballast = np.ones(args.ballast * (1 << 17)) if args.ballast else None  # 2^17 doubles per MiB, touched
    d = 100
    (fork, missed), (trusted, _), (query, _) = (
        _per_call(calls, d, how, args.deadline) for how in ("fork", "trusted", "query")
    )
    print(f"measure, d = {d}, {calls} calls, heap ballast {args.ballast} MiB, deadline {args.deadline} s:")
    print(f"  isolated (fork):     {fork * 1e6:9.1f} us per call   {missed} of {calls} gave the default")
    print(f"  in-process (trusted):{trusted * 1e6:9.1f} us per call   isolated / trusted = {fork / trusted:.0f}x")
    print(f"  laplace_query Total: {query * 1e6:9.1f} us per call")
    del ballast


if __name__ == "__main__":
    main()
