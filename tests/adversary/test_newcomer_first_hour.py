"""A newcomer's first hour with budgetcheck, from the README and the public API only.

Tests named ``test_defect_...`` assert what the README promises and fail on the code they were
written against; the others record what was checked and held.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import budgetcheck
from budgetcheck import (
    BudgetcheckError,
    BudgetExceeded,
    Clipped,
    Differences,
    GuardedStream,
    InvalidArgument,
    LedgerCorrupt,
    Linear,
    LiveStream,
    MeasurementFailed,
    Neighbours,
    PersonalizedLedger,
    PolicyCollection,
    RequirementSet,
    SecretAccess,
    StreamPolicy,
    SwellfishLedger,
    TimestampOrder,
    Total,
    WindowLedger,
    audit_file,
    execute,
    load_lines,
    open_ledger,
    publish,
)

UNIT = 2**1127  # window_sum's unit, from the README


def cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m budgetcheck ARGS`` as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "budgetcheck", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=dict(os.environ),
    )


def no_traceback(result: subprocess.CompletedProcess[str]) -> bool:
    """A user's mistake must not print a Python traceback."""
    return "Traceback (most recent call last)" not in result.stdout + result.stderr


def uniform() -> object:
    """The built-in Uniform mechanism (README: ``mechanisms``)."""
    from mechanisms import Uniform

    return Uniform()


def exported_log() -> list[str]:
    """A small, valid exported ledger: ε = 1, w = 3."""
    ledger = WindowLedger(epsilon=1.0, w=3, keep_records=True)
    ledger.spend(1, 0.5, purpose="a")
    ledger.spend(2, 0.5, purpose="b")
    ledger.spend(4, 0.25, purpose="c")
    return list(ledger.jsonl())


def record(t: object, amount: object, purpose: str = "x") -> str:
    """One exported spend record in the format ``jsonl()`` writes."""
    fields = {
        "t": t,
        "purpose": purpose,
        "amounts": [amount],
        "sensitivity": None,
        "noise_scale": None,
        "sampler": None,
    }
    return json.dumps(fields)


# ---------------------------------------------------------------------------------------------
# Privacy leaks (most severe)
# ---------------------------------------------------------------------------------------------


def test_defect_measure_result_shape_reveals_the_true_count() -> None:
    """README: measure's fn sends back 'only a finite float array ... checked for shape'; a
    neighbouring stream must not change what comes back beyond noise. Here the *shape* of the
    release is the exact count, for a charge of 0.01."""
    shapes = []
    for count in (5.0, 6.0):
        stream = GuardedStream(np.array([[count, 0.0]]))
        ledger = WindowLedger(epsilon=1.0, w=3, trusted_code=True, allow_vouched=True)
        ledger.bind(stream)
        try:
            out = ledger.measure(lambda v: np.zeros(int(v[0])), stream.secret(1), sensitivity=1.0, epsilon=0.01)
            shapes.append(out.shape)
        except MeasurementFailed:
            shapes.append(None)
    assert shapes[0] == shapes[1], f"release shape follows the data: {shapes}"


def test_defect_measure_failure_names_the_exception_class() -> None:
    """README threat model: a measured fn's failures 'come back as a fixed vocabulary (never its
    message, class name, ...)'. A data-dependent choice among built-in exception classes comes
    back verbatim, an un-noised side channel of several bits per call."""
    releases, reasons = [], []
    for kind in (ValueError, KeyError, ZeroDivisionError):
        stream = GuardedStream(np.array([[3.0]]))
        ledger = WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace", seed=7, trusted_code=True, allow_vouched=True)
        ledger.bind(stream)

        def fn(values: np.ndarray, kind: type[Exception] = kind) -> np.ndarray:
            raise kind("x")

        releases.append(ledger.measure(fn, stream.secret(1), sensitivity=1.0, epsilon=0.01).tolist())
        reasons.append([f.reason for f in ledger.failures])
    assert releases[0] == releases[1] == releases[2] and reasons[0] == reasons[1] == reasons[2], (releases, reasons)


# ---------------------------------------------------------------------------------------------
# Audit and exact accounting
# ---------------------------------------------------------------------------------------------


def test_defect_audit_passes_an_overspend_hidden_by_a_negative_amount(tmp_path: Path) -> None:
    """README: `budgetcheck audit LOG` re-checks an exported ledger; amounts are ε_t >= 0. A log
    whose window spent 0.9 + 0.9 at t = 1 (over ε = 1) passes once a record of -0.8 is added."""
    header = exported_log()[0]
    log = tmp_path / "offset.jsonl"
    log.write_text("\n".join([header, record(1, 0.9), record(1, 0.9), record(1, -0.8)]) + "\n")
    result = cli("audit", str(log))
    assert result.returncode != 0, result.stdout


def test_defect_load_lines_accepts_a_negative_amount() -> None:
    """load_lines: 'unknown formats or versions are refused, never guessed'; a negative spend is
    not a spend any ledger can write."""
    header = exported_log()[0]
    with pytest.raises(InvalidArgument):
        load_lines([header, record(1, -0.5)])


def test_defect_load_lines_guesses_a_fractional_window_and_timestamp() -> None:
    """load_lines must refuse, not guess: w = 2.5 is read as w = 2, t = 1.5 as t = 1."""
    header = json.loads(exported_log()[0])
    header["w"] = 2.5
    with pytest.raises(InvalidArgument):
        load_lines([json.dumps(header), record(1, 0.5)])
    with pytest.raises(InvalidArgument):
        load_lines([exported_log()[0], record(1.5, 0.5)])


def test_defect_fraction_amount_is_charged_below_its_exact_value() -> None:
    """README: 'the check is exact (a window one ulp over ε is refused)'. Amounts are numbers;
    Fraction(1, 3) is charged as the nearest double, which is below 1/3, so three thirds plus
    2^-60 (exactly over ε = 1) are all accepted. Decimal is refused; Fraction should be too, or
    charged at least its value."""
    ledger = WindowLedger(epsilon=1.0, w=3)
    try:
        for _ in range(3):
            ledger.spend(1, Fraction(1, 3), purpose="third")
    except InvalidArgument:
        return  # refusing Fraction like Decimal keeps the promise
    with pytest.raises(BudgetExceeded):
        ledger.spend(1, 2.0**-60, purpose="over")


# ---------------------------------------------------------------------------------------------
# Tracebacks and exit codes of the CLI
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("nan-amount", record(1, float("nan"))),
        ("inf-amount", record(1, float("inf"))),
        ("t-zero", record(0, 0.5)),
        ("t-negative", record(-5, 0.5)),
        ("deep-json", "[" * 100_000 + "]" * 100_000),
    ],
)
def test_defect_cli_audit_of_a_malformed_log_prints_a_traceback(tmp_path: Path, name: str, line: str) -> None:
    """README: bad input gets a clear error, exit 2 (input error) or 4 (damaged file), never 70."""
    log = tmp_path / f"{name}.jsonl"
    log.write_text(exported_log()[0] + "\n" + line + "\n")
    result = cli("audit", str(log))
    assert result.returncode in (2, 4), result.stderr[-500:]
    assert no_traceback(result)


def test_defect_cli_audit_of_a_non_utf8_log_prints_a_traceback(tmp_path: Path) -> None:
    """A binary file given to `audit` is an input error (exit 2), not an internal error."""
    log = tmp_path / "binary.jsonl"
    log.write_bytes(b"\xff\xfe\x00\x01garbage\n")
    result = cli("audit", str(log))
    assert result.returncode in (2, 4), result.stderr[-500:]
    assert no_traceback(result)


def test_defect_cli_publish_out_in_a_missing_directory_prints_a_traceback(tmp_path: Path) -> None:
    """`publish --out` naming a directory that does not exist is a usage error (exit 2)."""
    rows = tmp_path / "rows.csv"
    rows.write_text("1,3,4\n2,5,6\n")
    result = cli(
        "publish", "Uniform", "--ledger", str(tmp_path / "l.db"), "--epsilon", "1", "--w", "3", "-d", "2",
        "--input", str(rows), "--out", str(tmp_path / "missing" / "out.csv"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-500:]
    assert no_traceback(result)


@pytest.mark.parametrize("option", ["--junit-xml", "--report"])
def test_defect_cli_verify_output_in_a_missing_directory_prints_a_traceback(tmp_path: Path, option: str) -> None:
    """`verify --junit-xml/--report` into a missing directory: usage error, not exit 70."""
    target = tmp_path / "missing" / ("x.xml" if option == "--junit-xml" else "x.png")
    result = cli("verify", "Uniform", "--examples", "2", "--stages", "a", option, str(target))
    assert result.returncode == 2, result.stderr[-500:]
    assert no_traceback(result)


def test_defect_cli_bench_export_to_a_missing_directory_prints_a_traceback(tmp_path: Path) -> None:
    """`bench --export` into a missing directory: usage error, not exit 70 after the run."""
    result = cli(
        "bench", "--quick", "--mechanism", "Uniform", "--w", "40", "--runs", "1", "--streams-per-cell", "1",
        "--no-progress", "--results", str(tmp_path / "b.sqlite"), "--export", str(tmp_path / "missing" / "x.csv"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-500:]
    assert no_traceback(result)


def test_defect_cli_publish_ledger_in_a_missing_directory_exits_4(tmp_path: Path) -> None:
    """Exit 4 means 'a damaged or altered ledger file'; a path whose directory does not exist is a
    usage or input error (exit 2): nothing is damaged."""
    rows = tmp_path / "rows.csv"
    rows.write_text("1,3,4\n")
    result = cli(
        "publish", "Uniform", "--ledger", str(tmp_path / "missing" / "l.db"), "--epsilon", "1", "--w", "3",
        "-d", "2", "--input", str(rows),
    )  # fmt: skip
    assert result.returncode == 2, (result.returncode, result.stderr[-300:])


def test_defect_open_ledger_in_a_missing_directory_is_reported_as_corrupt(tmp_path: Path) -> None:
    """open_ledger on a path whose directory does not exist raises LedgerCorrupt (a damaged
    file); the documented error for bad input is InvalidArgument."""
    with pytest.raises(InvalidArgument):
        open_ledger(tmp_path / "missing" / "l.db", WindowLedger(epsilon=1.0, w=3))


def test_defect_cli_audit_of_a_log_silently_ignores_expect_head(tmp_path: Path) -> None:
    """`audit LOG --expect-head zz` on an exported log exits 0: the head the user asked to check
    was never checked (on a ledger file the same hash is refused as malformed, exit 2)."""
    log = tmp_path / "ok.jsonl"
    log.write_text("\n".join(exported_log()) + "\n")
    result = cli("audit", str(log), "--expect-head", "zz")
    assert result.returncode != 0, result.stdout


def test_defect_audit_does_not_see_an_edited_sampler(tmp_path: Path) -> None:
    """README: 'the file keeps the sampler it was opened with'; exit 4 is 'a damaged or altered
    ledger file'. Switching the stored sampler to the seeded one passes the audit ('chain: ok')."""
    import sqlite3

    path = tmp_path / "l.db"
    ledger = open_ledger(path, WindowLedger(epsilon=1.0, w=3))
    ledger.spend(1, 0.5, purpose="x")
    ledger.close()
    connection = sqlite3.connect(path)
    tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert "meta" in tables
    connection.execute("UPDATE meta SET value = 'numpy-laplace' WHERE key = 'sampler'")
    connection.commit()
    connection.close()
    assert audit_file(path).problem is not None


# ---------------------------------------------------------------------------------------------
# Wrong exception types from public functions given bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        [(1, ["a", 2])],  # a string count
        [(1, [1 + 1j, 2])],  # a complex count
        [5],  # a row that is not (t, counts)
        [(1, [1, 2], 3)],  # a row of three fields
        None,  # no rows at all
    ],
)
def test_defect_live_stream_bad_rows_raise_plain_python_errors(rows: object) -> None:
    """LiveStream rows are (t, d counts); a bad row must be InvalidArgument naming it, as a NaN,
    a wrong width or a float t already are."""
    with pytest.raises(BudgetcheckError):
        stream = LiveStream(rows, dimensions=2)  # type: ignore[arg-type]
        ledger = WindowLedger(epsilon=1.0, w=3)
        ledger.bind(stream)
        for secret in stream:
            ledger.laplace(secret, 0.1)


@pytest.mark.parametrize("mechanism", [None, "Uniform", 3])
def test_defect_execute_with_a_non_mechanism_raises_attribute_error(mechanism: object) -> None:
    """execute(None, ...) raises AttributeError; a documented error should name the argument."""
    with pytest.raises(BudgetcheckError):
        execute(mechanism, np.ones((5, 2)), epsilon=1.0, w=3)  # type: ignore[arg-type]


def test_defect_publish_out_path_in_a_missing_directory_raises_file_not_found(tmp_path: Path) -> None:
    """publish(out_path=...) into a missing directory: FileNotFoundError, not InvalidArgument."""
    with pytest.raises(BudgetcheckError):
        publish(
            uniform(), ["1,3,4"], tmp_path / "l.db", dimensions=2, epsilon=1.0, w=3,
            out_path=tmp_path / "missing" / "out.csv",
        )  # fmt: skip


def test_defect_export_to_a_missing_directory_raises_file_not_found(tmp_path: Path) -> None:
    """ledger.export(path) into a missing directory: FileNotFoundError, not InvalidArgument."""
    ledger = WindowLedger(epsilon=1.0, w=3, keep_records=True)
    ledger.spend(1, 0.5, purpose="x")
    with pytest.raises(BudgetcheckError):
        ledger.export(tmp_path / "missing" / "log.jsonl")


@pytest.mark.parametrize(("option", "value"), [("examples", 0), ("max_length", 0)])
def test_defect_verify_mechanism_leaks_a_foreign_exception(option: str, value: int) -> None:
    """verify_mechanism(examples=0) raises an InvalidArgument that is not budgetcheck's (its
    message talks of 'phases=[Phase.explicit]', an internal detail)."""
    with pytest.raises(BudgetcheckError):
        budgetcheck.verify_mechanism("Uniform", stages="a", **{option: value})  # type: ignore[arg-type]


def test_defect_top_set_of_a_policy_raises_type_error() -> None:
    """README: `top_set(policy)` names the timestamps that count. Given the StreamPolicy it
    raises TypeError ('<=' between int and StreamPolicy) instead of a documented error."""
    policy = StreamPolicy(1, 4, [1.0, 1.0])
    ledger = SwellfishLedger(PolicyCollection([policy]), epsilon=1.0)
    try:
        ledger.top_set(policy)  # type: ignore[arg-type]
    except BudgetcheckError:
        pass


def test_defect_huge_runs_raises_memory_error() -> None:
    """WindowLedger(runs=10**12) raises MemoryError (allocating 14.6 TiB) instead of a clear
    InvalidArgument naming runs."""
    with pytest.raises(BudgetcheckError):
        WindowLedger(epsilon=1.0, w=3, runs=10**12)


@pytest.mark.parametrize("call", ["open_ledger", "linear"])
def test_defect_wrong_argument_types_raise_plain_python_errors(tmp_path: Path, call: str) -> None:
    """open_ledger(5, ...) raises TypeError; Linear('ab') raises ValueError."""
    with pytest.raises(BudgetcheckError):
        if call == "open_ledger":
            open_ledger(5, WindowLedger(epsilon=1.0, w=3))  # type: ignore[arg-type]
        else:
            Linear("ab")  # type: ignore[arg-type]


def test_defect_complex_stream_values_lose_their_imaginary_part() -> None:
    """GuardedStream: 'finite values only'; complex data is accepted with a warning and its
    imaginary part silently dropped ('bad input ... loses nothing')."""
    with pytest.raises(InvalidArgument):
        GuardedStream(np.array([[1 + 1j, 2.0]]))


def test_defect_swellfish_spending_remaining_is_refused() -> None:
    """README: spending remaining(t) is never refused. Where no policy is relevant remaining is
    inf (documented), and spending it raises InvalidArgument."""
    ledger = SwellfishLedger(PolicyCollection([StreamPolicy(1, 4, [1.0, 1.0])]), epsilon=1.0)
    for t in range(1, 8):
        ledger.spend(t, ledger.remaining(t), purpose="remaining")


# ---------------------------------------------------------------------------------------------
# What held
# ---------------------------------------------------------------------------------------------


def test_readme_examples_run_as_printed() -> None:
    """Both code blocks of 'Writing your own mechanism' run and release the documented shapes."""
    import math

    import attrs

    from budgetcheck import rounding

    @attrs.frozen
    class EveryKth:
        """Sample every k-th timestamp."""

        k: int = 4
        name: str = "EveryKth"

        def run(self, stream: GuardedStream, ledger: WindowLedger) -> np.ndarray:
            p = ledger.params
            budget = rounding.share(p.epsilon, math.ceil(p.w / self.k))
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            last = np.zeros((ledger.runs, stream.dimensions))
            for secret in stream:
                if (secret.t - 1) % self.k == 0:
                    last = ledger.laplace(secret, budget)
                out[:, secret.t - 1] = last
            return out

    execution = budgetcheck.execute(EveryKth(), np.ones((100, 3)), epsilon=1.0, w=10, runs=5, seed=0)
    assert execution.releases.shape == (5, 100, 3)
    stream = GuardedStream(np.ones((100, 3)), neighbours=Neighbours.across_bins(2))
    ledger = WindowLedger(epsilon=1.0, w=10)
    ledger.bind(stream)
    assert ledger.laplace_query(stream.secret(1), Total(), 0.1).shape == (1, 1)
    assert ledger.laplace_query(stream.secret(2), Differences(), 0.1).shape == (1, 2)
    assert ledger.laplace_query(stream.secret(3), Clipped(Total(), 0, 1), 0.1).shape == (1, 1)
    assert ledger.laplace_query(stream.secret(4), Linear([[1.0, 0.5, 0.0]], claimed=2.0), 0.1).shape == (1, 1)


def test_window_ledger_is_exact_against_a_fraction_model() -> None:
    """Random spends (remaining, a part of it, one ulp over, tiny amounts) agree with an exact
    model: accepted iff every window stays <= ε; remaining is never refused; a refusal changes
    no window sum."""
    rng = random.Random(7)

    def fits(spends: dict[int, Fraction], t: int, w: int, eps: Fraction, add: Fraction) -> bool:
        after = dict(spends)
        after[t] = after.get(t, Fraction(0)) + add
        return all(
            sum((after.get(u, Fraction(0)) for u in range(s, s + w)), Fraction(0)) <= eps
            for s in range(t - w + 1, t + 1)
        )

    for _ in range(60):
        eps = rng.choice([1.0, 0.1, 0.3, 1e-300, 7.0, 1e300, rng.random()])
        w = rng.randint(1, 5)
        runs = rng.choice([1, 3])
        ledger = WindowLedger(epsilon=eps, w=w, runs=runs)
        spends: list[dict[int, Fraction]] = [{} for _ in range(runs)]
        t = 1
        for _ in range(20):
            t += rng.choice([0, 1, 2])
            rem = ledger.remaining(t)
            kind = rng.random()
            if kind < 0.35:
                amount = rem.copy()
            elif kind < 0.6:
                amount = np.array([rng.random() * x for x in rem])
            elif kind < 0.8:
                amount = np.nextafter(rem, np.inf)
            else:
                amount = np.array([rng.choice([0.0, 5e-324, 1e-17, rng.random() * eps]) for _ in range(runs)])
            expect = all(fits(spends[r], t, w, Fraction(eps), Fraction(float(amount[r]))) for r in range(runs))
            before = [ledger.window_sum(u) for u in range(t, t + w)]
            try:
                ledger.spend(t, amount, purpose="p")
                accepted = True
            except BudgetExceeded:
                accepted = False
            assert accepted == expect
            if kind < 0.35:
                assert accepted
            if accepted:
                for r in range(runs):
                    spends[r][t] = spends[r].get(t, Fraction(0)) + Fraction(float(amount[r]))
            else:
                assert before == [ledger.window_sum(u) for u in range(t, t + w)]


def test_bad_ledger_arguments_name_the_argument_and_value() -> None:
    """NaN, inf, negative, bool, strings, w = 0 and backwards timestamps are refused by name."""
    cases = [
        (lambda: WindowLedger(epsilon=float("nan"), w=3), "epsilon=nan"),
        (lambda: WindowLedger(epsilon=True, w=3), "epsilon=True"),
        (lambda: WindowLedger(epsilon="1", w=3), "epsilon='1'"),
        (lambda: WindowLedger(epsilon=1.0, w=0), "w=0"),
        (lambda: WindowLedger(epsilon=1.0, w=2.0), "w=2.0"),
        (lambda: WindowLedger(epsilon=1.0, w=3).spend(1, "0.1", purpose="x"), "epsilon='0.1'"),
        (lambda: WindowLedger(epsilon=1.0, w=3).spend(2**62 + 1, 0.1, purpose="x"), "2^62"),
        (lambda: WindowLedger(epsilon=1.0, w=3).remaining(0), "t=0"),
        (lambda: GuardedStream([[np.nan]]), "nan"),
        (lambda: GuardedStream([[1, 2], [3]]), "ragged"),
    ]
    for call, fragment in cases:
        with pytest.raises(InvalidArgument, match=None) as caught:
            call()
        assert fragment in str(caught.value)
    ledger = WindowLedger(epsilon=1.0, w=3)
    ledger.spend(5, 0.1, purpose="x")
    with pytest.raises(TimestampOrder):
        ledger.spend(3, 0.1, purpose="x")


def test_secret_refuses_every_plain_route() -> None:
    """float, numpy, iteration, indexing, comparison, arithmetic, truth, pickle and copy raise
    SecretAccess; a second ledger cannot read a bound stream."""
    import copy
    import pickle

    stream = GuardedStream(np.array([[5.0, 7.0]]))
    secret = stream.secret(1)
    routes = [
        lambda: float(secret),
        lambda: np.asarray(secret),
        lambda: list(secret),
        lambda: secret[0],
        lambda: secret == 5,
        lambda: secret + 0,
        lambda: bool(secret),
        lambda: pickle.dumps(secret),
        lambda: copy.deepcopy(secret),
        lambda: pickle.dumps(stream),
    ]
    for route in routes:
        with pytest.raises(SecretAccess):
            route()
    WindowLedger(epsilon=1.0, w=3).bind(stream)
    with pytest.raises(SecretAccess):
        WindowLedger(epsilon=1.0, w=3).laplace(stream.secret(1), 0.5)


def test_default_noise_is_not_reproducible_from_the_seed() -> None:
    """Two default ledgers with the same seed draw different noise (OS CSPRNG)."""
    data = np.arange(1, 31, dtype=float).reshape(10, 3)
    outputs = []
    for _ in range(2):
        stream = GuardedStream(data)
        ledger = WindowLedger(epsilon=10.0, w=10, seed=0, runs=4)
        ledger.bind(stream)
        outputs.append(
            np.concatenate(
                [
                    ledger.laplace(stream.secret(1), 0.5).ravel(),
                    ledger.laplace_query(stream.secret(2), Total(), 0.5).ravel(),
                    ledger.dissimilarity(stream.secret(3), np.zeros((4, 3)), 0.5).ravel(),
                ]
            )
        )
    assert not np.array_equal(outputs[0], outputs[1])


def test_personalized_remaining_is_spendable_and_one_ulp_over_is_refused() -> None:
    """PersonalizedLedger: remaining spent at every t; a 5e-324 spend after it is refused and
    changes nothing."""
    ledger = PersonalizedLedger(RequirementSet([(3, 1.0), (5, 0.5), (3, 1.0)]))
    for t in range(1, 12):
        ledger.spend(t, ledger.remaining(t), purpose="r")
    before = ledger.remaining(11)
    with pytest.raises(BudgetExceeded):
        ledger.spend(11, [0.0, 5e-324], purpose="over")
    assert np.array_equal(before, ledger.remaining(11))


def test_durable_ledger_refuses_damaged_and_edited_files(tmp_path: Path) -> None:
    """Empty, garbage and edited files are LedgerCorrupt; `audit` of an edited record exits 4;
    a reopened file keeps its spends."""
    import sqlite3

    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "garbage.db").write_bytes(b"not a ledger" * 20)
    for name in ("empty.db", "garbage.db"):
        with pytest.raises(LedgerCorrupt):
            open_ledger(tmp_path / name, WindowLedger(epsilon=1.0, w=3))
    path = tmp_path / "l.db"
    ledger = open_ledger(path, WindowLedger(epsilon=1.0, w=3))
    ledger.spend(1, 0.5, purpose="x")
    ledger.spend(2, ledger.remaining(2), purpose="rest")
    ledger.close()
    reopened = open_ledger(path, WindowLedger(epsilon=1.0, w=3))
    assert reopened.remaining(2)[0] == 0.0
    reopened.close()
    connection = sqlite3.connect(path)
    connection.executescript(
        "DROP TRIGGER records_no_update; UPDATE records SET amounts = x'000000000000c03f' WHERE seq = 1;"
    )
    connection.commit()
    connection.close()
    with pytest.raises(LedgerCorrupt):
        open_ledger(path, WindowLedger(epsilon=1.0, w=3))
    result = cli("audit", str(path))
    assert result.returncode == 4 and no_traceback(result)


def test_cli_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    """Unknown mechanisms, a module with a syntax error, bad options and a missing file: exit 2."""
    (tmp_path / "broken_syntax.py").write_text("def x(:\n")
    for args in (
        ("verify", "nosuchmech"),
        ("verify", "broken_syntax:X"),
        ("verify", "Uniform", "--seed", "-1"),
        ("verify", "Uniform", "--stages", "xyz"),
        ("prove", "--w-max", "0"),
        ("audit", str(tmp_path / "missing.db")),
        ("publish", "Uniform", "--ledger", str(tmp_path / "p.db"), "--epsilon", "nan", "--w", "3", "-d", "2"),
    ):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr[-300:])
        assert no_traceback(result), args


def test_cli_publish_bad_rows_stop_by_row_and_restart_replays(tmp_path: Path) -> None:
    """publish: NaN, negative, fractional and non-increasing rows exit 2 naming the row; numpy
    noise is refused; a restart replays what is stored and charges nothing new."""
    ledger = str(tmp_path / "l.db")
    for i, content in enumerate(("1,3,nan\n", "1,3,-4\n", "1,3,4.5\n", "1,3,4\n1,5,6\n")):
        rows = tmp_path / f"bad{i}.csv"
        rows.write_text(content)
        result = cli(
            "publish", "Uniform", "--ledger", str(tmp_path / f"b{i}.db"), "--epsilon", "1", "--w", "3", "-d", "2",
            "--input", str(rows),
        )  # fmt: skip
        assert result.returncode == 2 and "row" in result.stderr and no_traceback(result)
    rows = tmp_path / "rows.csv"
    rows.write_text("1,3,4\n2,5,6\n3,7,8\n")
    args = ("publish", "Uniform", "--ledger", ledger, "--epsilon", "1", "--w", "3", "-d", "2", "--input", str(rows))
    assert cli(*args, "--sampler", "numpy-laplace").returncode == 2
    first = cli(*args)
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 3
    before = audit_file(ledger).records
    second = cli(*args)
    assert second.returncode == 0
    assert audit_file(ledger).records == before


OWN_MODULE = textwrap.dedent(
    """
    import attrs
    import numpy as np
    from budgetcheck import rounding

    @attrs.frozen
    class Even:
        name: str = "Even"

        def run(self, stream, ledger):
            budget = rounding.share(ledger.params.epsilon, ledger.params.w)
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            for secret in stream:
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
            return out

    @attrs.frozen
    class Greedy:
        name: str = "Greedy"

        def run(self, stream, ledger):
            budget = ledger.params.epsilon / max(ledger.params.w - 1, 1)
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            for secret in stream:
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
            return out
    """
)


def test_verify_own_mechanisms_correct_and_overspending(tmp_path: Path) -> None:
    """`verify my_module:X` from the working directory: a correct mechanism exits 0, an
    overspending one exits 1 with a reproducible call."""
    (tmp_path / "newcomer_mechs.py").write_text(OWN_MODULE)
    good = cli("verify", "newcomer_mechs:Even", "--examples", "5", "--stages", "ab", cwd=tmp_path)
    assert good.returncode == 0, good.stdout[-500:]
    bad = cli("verify", "newcomer_mechs:Greedy", "--examples", "5", "--stages", "a", cwd=tmp_path)
    assert bad.returncode == 1 and "execute(" in bad.stdout and no_traceback(bad)


def test_library_publish_writes_each_release_once() -> None:
    """publish() on a fresh file releases one line per row and charges each row."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        out = io.StringIO()
        summary = publish(
            uniform(), ["1,3,4", "2,5,6"], Path(directory) / "l.db", dimensions=2, epsilon=1.0, w=3, out=out
        )
        assert summary.published == 2
        assert [line.split(",")[0] for line in out.getvalue().splitlines()] == ["1", "2"]
