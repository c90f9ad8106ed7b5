"""A practitioner's loop: publish live counts through a ledger, refuse what would overspend, audit.

The ledger is the accounting layer between the data and the noise: it checks the w-event window
before drawing noise, and a refused spend releases nothing and changes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from budgetcheck import BudgetExceeded, GuardedStream, WEventParams, WindowLedger, audit_windows, load_lines


def main() -> None:
    hourly_counts = np.array([[120, 40], [130, 38], [400, 41], [410, 45], [150, 39], [140, 44]], dtype=float)
    stream = GuardedStream(hourly_counts)
    ledger = WindowLedger(WEventParams(epsilon=1.0, w=3), seed=7, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    for secret in stream:
        want = 0.6 if secret.t == 3 else 0.25  # a greedy spend at t = 3 ...
        try:
            noisy = ledger.laplace(secret, want)
        except BudgetExceeded as refusal:  # ... is refused when it would break a window
            print(f"t={secret.t}: refused ({refusal.window}); spending what remains instead")
            noisy = ledger.laplace(secret, ledger.remaining(secret.t))
        print(f"t={secret.t}: released {np.round(noisy[0], 1).tolist()}")

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "ledger.jsonl"
        ledger.export(log)
        header, records = load_lines(log.read_text().splitlines())
        report = audit_windows(records, epsilon=header.epsilon, w=header.w, runs=header.runs)
    print(f"offline audit: ok={report.ok}, worst window {float(report.worst_ratio):.3f} of epsilon")
    assert report.ok


if __name__ == "__main__":
    main()
