"""The server-crash campaign: ``budgetcheck publish`` on a PostgreSQL ledger whose server crashes mid-publish.

Each trial runs the publisher (a separate process, rows on its stdin as fast as it takes them) on a
fresh ledger, crashes the server once it has written a random number of releases — ``pg_ctl stop -m
immediate`` (the postmaster and every backend quit at once, shared buffers unwritten: a crash as far as
the database is concerned) or SIGKILL of the postmaster (its backends notice and quit) — restarts the
server and the publisher (which resumes from the ledger), ``crashes`` times, then lets it finish. The
server runs with ``wal_writer_delay = 10s``: a commit made without waiting for its WAL flush stays in
memory for up to 10 s, so a mode that writes a release out before it is durable loses it in every trial
(any server setting must be safe, this one only makes the loss certain rather than likely).

It counts, over every run of the trial:

- **double releases**: timestamps written out with two different values (on stdout, across the runs)
  or written twice (``--out``, whose lines the publisher reconciles with the ledger at every start);
- **lost commits**: releases written out before a crash that the ledger does not hold after it (with
  the value written), or a restart refused because the output holds releases the ledger lost;
- and the final ledger's audit.

The test (tests/durable/test_server_crash.py) and ``benchmarks/durable_load.py`` run it for every
durability mode ``publish`` offers, both crashes and both outputs. It needs the dev extra's ``pgserver``.
"""

from __future__ import annotations

import importlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from budgetcheck.durable.audit_file import audit_file
from budgetcheck.durable.journal import decode_array, open_store
from budgetcheck.durable.postgres import with_ledger

CRASHES: Final = ("immediate", "sigkill")
OUTPUTS: Final = ("out", "stdout")
MECHANISM: Final = "BD"  # two charged operations per timestamp (dissimilarity, then publication or not)
_ARGS: Final = ("--epsilon", "1", "--w", "5", "-d", "2")


@attrs.frozen
class CrashTrial:
    """What one trial saw (see the module docstring)."""

    durability: str
    crash: str
    output: str
    timestamps: int
    crashes: int  # server crashes made mid-publish
    runs: int  # publisher runs (crashed ones and the last)
    written: int  # release lines written, over every run
    double_releases: int
    lost_commits: int
    stored: int  # releases the ledger holds at the end
    audit_ok: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.double_releases == 0
            and self.lost_commits == 0
            and self.audit_ok
            and self.stored == self.timestamps
            and self.crashes > 0
        )


@attrs.define
class CrashServer:
    """A PostgreSQL server of its own (pgserver's binaries) that can be crashed and restarted."""

    folder: Path
    _server: Any = None

    def start(self) -> str:
        """Start (or restart after a crash) the server; its URL."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
            pgserver = importlib.import_module("pgserver")  # the dev extra's (untyped)
            deadline = time.monotonic() + 60
            while True:
                try:
                    if self._server is None:
                        self._server = pgserver.get_server(self.folder, cleanup_mode="stop")
                        self._server.psql("ALTER SYSTEM SET wal_writer_delay = '10s'")
                        self._server.psql("SELECT pg_reload_conf()")
                    else:
                        self._server.ensure_postgres_running()  # a crashed server's backends may take a moment
                    break
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError):  # not up yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return str(self._server.get_uri())

    def crash(self, how: str) -> None:
        """``immediate``: pg_ctl stop -m immediate; ``sigkill``: SIGKILL of the postmaster, then wait
        for its backends to notice and quit."""
        if how == "immediate":
            importlib.import_module("pgserver._commands").pg_ctl(
                ["-m", "immediate", "stop"], pgdata=self.folder, user=self._server.system_user
            )
            return
        psutil = importlib.import_module("psutil")  # pgserver's dependency
        postmaster = psutil.Process(self._server.get_pid())
        children = postmaster.children(recursive=True)
        postmaster.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs(children, timeout=20)
        for child in alive:  # a backend that did not notice: what a host crash would do to it too
            child.kill()

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()


def run_trial(
    server: CrashServer,
    folder: Path,
    *,
    durability: str,
    crash: str,
    output: str,
    timestamps: int,
    crashes: int,
    seed: int,
) -> CrashTrial:
    """One trial (see the module docstring); ``folder`` takes its input and output files."""
    rng = random.Random(seed)
    started = time.perf_counter()
    url = with_ledger(server.start(), f"crash_{uuid.uuid4().hex[:12]}")
    out = folder / f"out-{uuid.uuid4().hex[:8]}.csv"
    rows = "".join(f"{t},{100 + (t * 7) % 13},{t % 5}\n" for t in range(1, timestamps + 1)).encode()
    command = [
        sys.executable,
        "-c",
        "from budgetcheck.cli import main; main()",
        "publish",
        MECHANISM,
        *_ARGS,
        "--ledger",
        url,
        "--input",
        "-",
        "--durability",
        durability,
        "--lock-timeout",
        "10",
        *(("--out", str(out)) if output == "out" else ()),
    ]
    written: dict[int, set[str]] = {}  # t -> values written (stdout: over every run)
    lost: set[int] = set()  # timestamps written out that a restart found missing or different
    made = runs = lines = 0
    while True:
        crash_at = rng.randint(timestamps // 10, timestamps // 2) if made < crashes else None
        runs += 1
        seen, code = _run(command, rows, out if output == "out" else None, crash_at, lambda: server.crash(crash))
        if output == "out":
            seen = _lines(out)  # what the file held at the crash (or the end)
        lines += len(seen) if output == "stdout" else 0
        for t, value in seen:
            written.setdefault(t, set()).add(value)
        if code is not None and code != 0:  # the run ended on its own, refused (e.g. exit 4): the trial is stuck
            break
        if crash_at is None:
            break
        made += 1
        server.start()
        stored = _stored(url)
        lost.update(t for t, value in seen if stored.get(t) != value)
    if output == "out":
        final = _lines(out)
        lines = len(final)
        doubles = len(final) - len({t for t, _ in final}) + sum(len(v) - 1 for v in written.values())
    else:
        doubles = sum(len(values) - 1 for values in written.values())
    stored = _stored(url)
    lost.update(t for t, values in written.items() if stored.get(t) not in values)
    report = audit_file(url)
    return CrashTrial(
        durability=durability,
        crash=crash,
        output=output,
        timestamps=timestamps,
        crashes=made,
        runs=runs,
        written=lines,
        double_releases=doubles,
        lost_commits=len(lost),
        stored=len(stored),
        audit_ok=report.ok,
        seconds=time.perf_counter() - started,
    )


def campaign(
    folder: Path,
    *,
    timestamps: int,
    crashes: int,
    seed: int = 0,
    modes: tuple[str, ...] = ("full", "process"),
    chosen: tuple[int, ...] | None = None,
) -> Iterator[CrashTrial]:
    """A trial per durability mode, crash and output (on one server of its own under ``folder``); ``chosen``:
    only the trials of these indices in that order (None: every one)."""
    server = CrashServer(folder / "pg")
    try:
        for index, (durability, crash, output) in enumerate((d, c, o) for d in modes for c in CRASHES for o in OUTPUTS):
            if chosen is not None and index not in chosen:
                continue
            yield run_trial(
                server,
                folder,
                durability=durability,
                crash=crash,
                output=output,
                timestamps=timestamps,
                crashes=crashes,
                seed=seed + index,
            )
    finally:
        server.stop()


def _run(
    command: list[str], rows: bytes, out: Path | None, crash_at: int | None, crash: Any
) -> tuple[list[tuple[int, str]], int | None]:
    """Run the publisher on ``rows``; crash the server once ``crash_at`` releases are written (if given), then
    wait for the publisher to give up. The (t, value) lines it wrote on stdout, and its exit code if it
    ended on its own (None when it was crashed)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None
    got: list[tuple[int, str]] = []

    def feed() -> None:
        try:
            stdin.write(rows)
            stdin.close()
        except OSError:  # the publisher stopped (the server crashed)
            pass

    def read() -> None:
        for line in stdout:
            got.append(_parse(line.decode()))

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=read, daemon=True)]
    for thread in threads:
        thread.start()
    crashed = False
    if crash_at is not None:
        deadline = time.monotonic() + 120
        while (len(_lines(out)) if out is not None else len(got)) < crash_at:
            if process.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.002)
        else:
            crash()
            crashed = True
    code = process.wait(timeout=180)
    for thread in threads:
        thread.join(timeout=30)
    for pipe in (stdin, stdout):
        try:
            pipe.close()
        except OSError:  # stdin: the publisher had stopped reading
            pass
    return got, None if crashed else code


def _parse(line: str) -> tuple[int, str]:
    t, _, value = line.strip().partition(",")
    return int(t), value


def _lines(path: Path | None) -> list[tuple[int, str]]:
    if path is None or not path.exists():
        return []
    text = path.read_bytes().decode()
    return [_parse(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def _stored(url: str) -> dict[int, str]:
    """The ledger's releases as the publisher writes them (t -> 'v1,v2')."""
    store = open_store(url)
    try:
        found = store.execute("SELECT t, output FROM records WHERE kind = 1").fetchall()
    finally:
        store.close()
    return {
        int(t): ",".join(str(int(v)) for v in decode_array(bytes(blob), "release").ravel().tolist())
        for t, blob in found
    }
