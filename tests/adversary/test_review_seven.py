"""Review seven: today's features tried as a demanding new user would, from the docs and ``--help``.

Each test here failed before its fix: an interrupted command exited 1 (which the exit-code table
reserves for a violation), ``from budgetcheck import *`` failed on the core install, and the
``budgetcheck_verify`` fixture printed its failure twice.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-c", "from budgetcheck.cli import main; main()"]


def test_an_interrupted_command_exits_130_not_1_which_means_a_violation(tmp_path: Path) -> None:
    """Ctrl-C on a publisher waiting for its input: exit 130 (docs/reference/exit-codes.md), one line, no
    traceback; click alone printed "Aborted!" and exited 1, "a violation was found" for a CI script."""
    publisher = subprocess.Popen(
        [*CLI, "publish", "BD", "--ledger", "ledger.db", "--epsilon", "1", "--w", "4", "--input", "-"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300  # the ledger is made inside the command: the interrupt lands in it
    while not (tmp_path / "ledger.db").exists() and publisher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert publisher.poll() is None, publisher.communicate()
    publisher.send_signal(signal.SIGINT)
    out, err = publisher.communicate(timeout=300)
    assert publisher.returncode == 130, (publisher.returncode, err)
    assert "Traceback" not in err and "interrupted (exit 130)" in err, err
    assert (tmp_path / "ledger.db").exists()  # what was stored is kept
