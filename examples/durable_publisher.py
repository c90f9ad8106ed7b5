"""A live publisher that survives a crash: BD on a ledger file, exact discrete Laplace noise.

The ledger file is the accounting layer: every spend is on disk before its value is released,
a restarted publisher replays the file to get back its state, and the offline auditor checks the
hash chain and every window.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from budgetcheck import audit_file, publish
from mechanisms import BD


def main() -> None:
    hourly = [f"{t},{120 + 40 * (t % 6 == 0)},{40 + t % 3}" for t in range(1, 25)]
    with tempfile.TemporaryDirectory() as folder:
        ledger, out = Path(folder) / "ledger.db", Path(folder) / "released.csv"
        first = publish(BD(), hourly[:10], ledger, epsilon=1.0, w=6, dimensions=2, out_path=out, durability="process",
                        sampler="discrete-laplace")
        print(f"first run: published {first.published} hours, then the process stops")
        again = publish(BD(), hourly, ledger, epsilon=1.0, w=6, dimensions=2, out_path=out, durability="process",
                        sampler="discrete-laplace")
        print(f"restart: replayed {again.replayed} hours from the ledger, published {again.published} more")
        lines = out.read_text().splitlines()
        print("last releases:", lines[-3:])
        report = audit_file(ledger)
        print(f"audit: chain {'ok' if report.problem is None else report.problem}, worst window {float(report.worst_ratio):.3f} of epsilon")
        assert report.ok and [int(line.split(',')[0]) for line in lines] == list(range(1, 25))


if __name__ == "__main__":
    main()
