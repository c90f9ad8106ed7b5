"""A crashed PostgreSQL server never makes the publisher release a timestamp twice (issue 42, item 2).

The campaign of :mod:`budgetcheck.durable.server_crash`: ``budgetcheck publish`` on a PostgreSQL ledger,
the server crashed mid-publish (``pg_ctl stop -m immediate``, or SIGKILL of the postmaster), restarted,
the publisher resumed; for every durability mode ``publish`` offers, both outputs (``--out`` and stdout):
0 double releases, 0 lost commits, every timestamp stored once, the audit ok. The server runs with a
10 s WAL writer delay, so a release written out before its commit is flushed is lost in every trial
(today's ``--durability process`` lost 1 to 12 per trial and doubled some on stdout)."""

from __future__ import annotations

import io
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import budgetcheck as bc
from budgetcheck.cli.publish import publish
from budgetcheck.durable.server_crash import CrashServer, run_trial

pytest.importorskip("pgserver", reason="the dev extra's pgserver starts the PostgreSQL server")

MODES = next(p for p in publish.params if p.name == "durability").type
assert isinstance(MODES, click.Choice)


@pytest.fixture(scope="module")
def server() -> Iterator[CrashServer]:
    # a folder of its own under /tmp, not pytest's (mode 0700 there: the restarted server, which runs as
    # pgserver's own user when the tests run as root, must reach its data directory)
    with tempfile.TemporaryDirectory(prefix="bc-crash-") as folder:
        os.chmod(folder, 0o755)
        crashed = CrashServer(Path(folder) / "pg")
        yield crashed
        crashed.stop()


@pytest.mark.parametrize("output", ["out", "stdout"])
@pytest.mark.parametrize("crash", ["immediate", "sigkill"])
@pytest.mark.parametrize("durability", list(MODES.choices))
def test_a_server_crash_mid_publish_loses_and_doubles_nothing(
    server: CrashServer, tmp_path: Path, durability: str, crash: str, output: str
) -> None:
    trial = run_trial(
        server,
        tmp_path,
        durability=durability,
        crash=crash,
        output=output,
        timestamps=120,
        crashes=1,
        seed=zlib.crc32(f"{durability} {crash} {output}".encode()),
    )
    assert trial.crashes == 1, trial  # the server really crashed mid-publish
    assert trial.double_releases == 0, trial
    assert trial.lost_commits == 0, trial
    assert trial.stored == trial.timestamps and trial.audit_ok, trial
    assert trial.written >= trial.timestamps, trial  # stdout: the resumed run writes its last release again


class _Recording(io.StringIO):
    """An output that notes, at each write, how many times the ledger's write-ahead log was synced so far."""

    def __init__(self, syncs: list[str]) -> None:
        super().__init__()
        self.syncs, self.at_write = syncs, []

    def write(self, text: str) -> int:
        self.at_write.append(sum(path.endswith("-wal") for path in self.syncs))
        return super().write(text)


def test_an_sqlite_release_is_synced_before_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host power loss cannot be staged in a test; what it needs can be seen: under --durability process
    (synchronous=NORMAL: SQLite syncs nothing at a commit) each release line is written only after the
    publisher's fsync of the ledger's log, one per release (full mode: SQLite's own at every commit)."""
    from budgetcheck.durable.publish import publish as run

    syncs: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        syncs.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    out = _Recording(syncs)
    lines = [f"{t},{3 + t % 4},{t % 3}\n" for t in range(1, 21)]
    run(
        bc.load_mechanism("BD"),
        lines,
        tmp_path / "l.db",
        epsilon=1.0,
        w=5,
        dimensions=2,
        out=out,
        durability="process",
    )
    assert len(out.at_write) == 20
    assert out.at_write == list(range(1, 21)), out.at_write
