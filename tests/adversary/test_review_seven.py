"""Review seven: today's features tried as a demanding new user would, from the docs and ``--help``.

Each test here failed before its fix: an interrupted command exited 1 (which the exit-code table
reserves for a violation), ``from budgetcheck import *`` failed on the core install, and the
``budgetcheck_verify`` fixture printed its failure twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli.test_light_install import _core  # a core install, simulated: the extras' modules refused

pytest_plugins = ["pytester"]

SILENT_FOR = 120  # seconds a study may take to start and connect on a loaded machine
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


def test_a_star_import_works_on_the_core_install(tmp_path: Path) -> None:
    """``from budgetcheck import *`` on ``pip install .`` (no verify extra) raised MissingExtra for
    ``Counterexample``; it now takes the core's names, and a verification name used by name still
    names the extra in one line (docs/howto/install.md)."""
    script = (
        "from budgetcheck import *\n"
        "print(WindowLedger(epsilon=1.0, w=2).remaining(1))\n"
        "print('verify_mechanism' in dir())\n"
        "import budgetcheck\n"
        "try:\n"
        "    budgetcheck.verify_mechanism\n"
        "except budgetcheck.BudgetcheckError as missing:\n"
        "    print(type(missing).__name__, \"pip install 'budgetcheck[verify]'\" in str(missing))\n"
    )
    ran = _core(tmp_path, "-c", script)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["[1.]", "False", "MissingExtra", "True"], ran.stdout


def test_a_star_import_with_the_extra_keeps_the_verification_names() -> None:
    namespace: dict[str, object] = {}
    exec("from budgetcheck import *", namespace)
    assert {"verify_mechanism", "VerifyResult", "Counterexample", "WindowLedger"} <= set(namespace)


def test_the_fixture_reports_a_failure_once(pytester: pytest.Pytester) -> None:
    """The ``budgetcheck_verify`` fixture's failure was printed twice, joined by "During handling of the
    above exception, another exception occurred" (the pytest plugin's docstring: reported as the CLI
    reports it, with no frames). A name that does not load fails without running a stage."""
    pytester.makepyfile(test_mine="def test_mine(budgetcheck_verify):\n    budgetcheck_verify('Unifrom')\n")
    failing = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rN")  # -rN: no summary line
    failing.assert_outcomes(failed=1)
    text = failing.stdout.str()
    assert "another exception occurred" not in text, text
    assert text.count("budgetcheck verify Unifrom:") == 1, text


@pytest.mark.parametrize("sub", ["personalized", "swellfish", "report"])
def test_a_bench_subcommand_shows_its_help_on_the_core_install_and_names_the_extra_when_run(
    tmp_path: Path, sub: str
) -> None:
    """``bench --help`` worked on the core install but ``bench personalized --help`` stopped with the
    missing extra (exit 2): a user could not read what the command needs. Its help now prints (exit 0);
    running it names the command and the extra in one line (exit 2, docs/howto/install.md)."""
    shown = _core(tmp_path, "bench", sub, "--help")
    assert shown.returncode == 0 and f"Usage: budgetcheck bench {sub}" in shown.stdout, shown.stderr
    (tmp_path / "results.jsonl").write_text("{}\n")
    ran = _core(tmp_path, "bench", sub, *(["results.jsonl"] if sub == "report" else []))
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith(f"Error: budgetcheck bench {sub} needs the bench extra"), line
    assert line.endswith("pip install 'budgetcheck[bench]'"), line


def test_bench_help_lists_each_study_in_a_whole_phrase() -> None:
    """``bench --help`` listed the personalized study as "The personalized w-event study (Du et al.":
    click cut its summary at the abbreviation's full stop."""
    shown = subprocess.run([*CLI, "bench", "--help"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    commands = shown.stdout.split("Commands:")[1]
    (line,) = [row for row in commands.splitlines() if row.strip().startswith("personalized")]
    assert "(Du et al. 2025" in line and not line.rstrip().endswith("(Du et al."), line


def test_a_subset_that_ran_no_stream_reports_no_worst_window_and_no_bound(tmp_path: Path) -> None:
    """``verify BD --stages c`` printed a worst window of 0.000000 and a bound of "0, 0, 0" (JSON: 0.0 and
    w_max 0, horizon 0) though no stage ran a stream: a measurement that was never made. Now "-" in the
    table and null in --json (docs/reference/formats.md), as for the stages that did not run."""
    table = subprocess.run([*CLI, "verify", "Uniform", "--stages", "c"], capture_output=True, text=True, timeout=600)
    assert table.returncode == 3, table.stdout + table.stderr  # exit-codes.md: a proof alone is inconclusive
    (row,) = [line for line in table.stdout.splitlines() if line.startswith("Uniform ")]
    assert "0.000000" not in row and "0, 0, 0" not in row, row
    as_json = subprocess.run(
        [*CLI, "verify", "Uniform", "--stages", "c", "--json"], capture_output=True, text=True, timeout=600
    )
    (result,) = json.loads(as_json.stdout)["results"]
    assert result["worst_window_over_epsilon"] is None and result["bound"] is None, result
    # the note speaks of the proof only when the proof ran
    assert "(a proof covers it only with e's rule conformance)" in result["verdict_note"]
    explored = subprocess.run(
        [*CLI, "verify", "Uniform", "--stages", "b", "--examples", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    (secret,) = json.loads(explored.stdout)["results"]
    assert secret["bound"] is not None and secret["worst_window_over_epsilon"] is not None, secret
    assert "a proof covers" not in secret["verdict_note"], secret["verdict_note"]


@pytest.mark.parametrize("address", ["nonsense", "bogus://x:1", "tcp://[::1"])
def test_bench_names_a_scheduler_address_dask_cannot_parse(tmp_path: Path, address: str) -> None:
    """``bench --executor dask --scheduler nonsense`` exited 70 with dask's ValueError traceback, "an
    internal error of budgetcheck"; ``bench personalized`` and ``swellfish`` already said exit 2 naming
    the address. Now ``bench`` does too (docs/howto/dask-benchmark.md, docs/reference/exit-codes.md)."""
    ran = subprocess.run(
        [*CLI, "bench", "--mechanism", "Uniform", "--stream", "s40-a10-p300", "--runs", "1", "--no-progress"]
        + ["--executor", "dask", "--scheduler", address, "--results", str(tmp_path / "r.sqlite")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert f"Error: scheduler={address!r}: cannot connect to the Dask scheduler" in ran.stderr, ran.stderr


def test_a_personalized_report_that_compares_nothing_says_why(tmp_path: Path) -> None:
    """``bench report`` on the results of ``bench personalized --mechanism PBD`` printed the comparison's
    header and no row, with no word of why. It now says which pairs a row needs and what the file holds."""
    source = Path(__file__).resolve().parents[2] / "results" / "du2025" / "personalized.jsonl"
    lines = source.read_text().splitlines()
    only_pbd = [lines[0], *(line for line in lines[1:] if json.loads(line)["mechanism"] == "PBD")]
    results = tmp_path / "personalized.jsonl"
    results.write_text("\n".join(only_pbd) + "\n")
    ran = subprocess.run(
        [*CLI, "bench", "report", str(results), "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    assert "no row: a row compares PBA with StrictestBA or PLBU" in ran.stdout, ran.stdout
    assert "this file holds PBD;" in ran.stdout, ran.stdout


@pytest.mark.parametrize("study", [["personalized", "--dataset", "TLNS", "--mechanism", "PBD"], ["swellfish"]])
def test_a_scheduler_without_a_worker_is_said_not_waited_on_in_silence(tmp_path: Path, study: list[str]) -> None:
    """Following docs/howto/dask-benchmark.md but forgetting step 2's ``dask worker``: the study sat
    there printing nothing. It now says on stderr that the scheduler has no worker and how to start one;
    Ctrl-C then stops it with exit 130."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        address = cluster.scheduler_address
        waiting = subprocess.Popen(
            [*CLI, "bench", *study, "--executor", "dask", "--scheduler", address, "--out", str(tmp_path / "out")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiting.stderr is not None
        silent = threading.Timer(SILENT_FOR, waiting.send_signal, (signal.SIGINT,))  # a silent study: stopped
        silent.start()
        line = waiting.stderr.readline()  # the first line: the study has nothing else to say before a worker
        silent.cancel()
        waiting.send_signal(signal.SIGINT)
        rest = waiting.communicate(timeout=300)[1]
    assert line.startswith(f"waiting for a worker: the Dask scheduler at {address} has none yet"), line + rest
    assert f"dask worker {address}" in line, line
    assert waiting.returncode == 130, rest


def test_every_inconclusive_subset_note_says_it_the_same_way() -> None:
    """A subset's inconclusive note read "skipped ...: that leaves inconclusive, since ..." except when a
    stage could not decide: "skipped ...: inconclusive, since ...". One phrase for one verdict."""
    from budgetcheck.verify.subset import skipped_note
    from budgetcheck.verify.verdict import Outcome

    notes = [
        skipped_note("e", Outcome.INCONCLUSIVE, {"exploration": "inconclusive"}),
        skipped_note("c", Outcome.INCONCLUSIVE, {"proof": "pass"}),
        skipped_note("a", Outcome.INCONCLUSIVE, {"ledger replay": "pass"}, vouched=True),
    ]
    for note in notes:
        assert note is not None and ": that leaves inconclusive, since " in note, note
