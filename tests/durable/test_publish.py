"""budgetcheck publish, LiveStream and the discrete Laplace sampler."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.journal import decode_array
from budgetcheck.ledger.noise import DiscreteLaplace, bernoulli_exp, discrete_laplace
from mechanisms import BA, BD, AdaPub, DSATw, FASTw, PeGaSus, RescueDP, Uniform

ARGS = ["--epsilon", "1", "--w", "5", "-d", "2"]


def rows(n: int, start: int = 1) -> str:
    return "".join(f"{t},{100 + (t * 7) % 13},{t % 5}\n" for t in range(start, start + n))


def invoke(tmp_path: Path, text: str, *extra: str, mechanism: str = "BD") -> tuple[int, str]:
    source = tmp_path / "in.csv"
    source.write_text(text)
    result = CliRunner().invoke(
        main,
        [
            "publish",
            mechanism,
            "--ledger",
            str(tmp_path / "l.db"),
            *ARGS,
            "--input",
            str(source),
            "--out",
            str(tmp_path / "out.csv"),
            "--durability",
            "process",
            *extra,
        ],
    )
    return result.exit_code, result.output


def released(tmp_path: Path) -> list[list[str]]:
    return [line.split(",") for line in (tmp_path / "out.csv").read_text().splitlines()]


def test_publish_writes_one_line_per_timestamp_and_the_file_audits(tmp_path: Path) -> None:
    code, output = invoke(tmp_path, rows(30))
    assert code == 0, output
    lines = released(tmp_path)
    assert [int(line[0]) for line in lines] == list(range(1, 31))
    assert all(float(v).is_integer() for line in lines for v in line[1:])  # discrete sampler: integers
    report = bc.audit_file(tmp_path / "l.db")
    assert report.ok and report.worst_ratio <= 1
    with bc.open_ledger(
        tmp_path / "l.db", bc.WindowLedger(bc.WEventParams(1.0, 5), keep_records=True)
    ) as ledger:  # the default: discrete
        assert {r.sampler for r in ledger.records} == {"discrete-laplace"}


def test_a_restart_resumes_at_the_next_timestamp_in_the_same_state(tmp_path: Path) -> None:
    assert invoke(tmp_path, rows(12))[0] == 0
    with open(tmp_path / "out.csv", "a") as handle:
        handle.write("13,99")  # a torn line from a crash is cut off, never kept
    code, output = invoke(tmp_path, rows(25))
    assert code == 0, output
    assert "replayed 12" in output
    assert [int(line[0]) for line in released(tmp_path)] == list(range(1, 26))
    assert bc.audit_file(tmp_path / "l.db").ok
    # A different mechanism or parameters on the same file are refused.
    assert invoke(tmp_path, rows(26), mechanism="BA")[0] == 2
    source = tmp_path / "in.csv"
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "BD",
            "--ledger",
            str(tmp_path / "l.db"),
            "--epsilon",
            "2",
            "--w",
            "5",
            "-d",
            "2",
            "--input",
            str(source),
            "--out",
            str(tmp_path / "out.csv"),
        ],
    )
    assert result.exit_code == 2 and "epsilon=2.0" in result.output


@pytest.mark.parametrize("mechanism", ["FASTw", "DSATw", "RescueDP", "AdaPub", "PeGaSus"])
def test_adaptive_mechanisms_publish_live_and_resume_from_their_stored_outputs(tmp_path: Path, mechanism: str) -> None:
    """Their Kalman filters, controllers, groupings and AboveThreshold answers are rebuilt from the
    replayed outputs on a restart (publish checks that every replayed release equals the stored one)."""
    assert (
        invoke(tmp_path, rows(12), mechanism=mechanism)[0] == 0
    )  # AdaPub, PeGaSus: AboveThreshold on the discrete grid
    code, output = invoke(tmp_path, rows(40), mechanism=mechanism)
    assert code == 0, output
    assert "replayed 12" in output
    assert [int(line[0]) for line in released(tmp_path)] == list(range(1, 41))
    assert bc.audit_file(tmp_path / "l.db").ok


class _Grouper:
    """A live mechanism that publishes an AboveThreshold's answers (its openings) as its releases."""

    name = "opened-grouper"

    def __init__(self) -> None:
        self.opened: list[list[bool]] = []

    def releases(self, stream: bc.LiveStream, ledger: bc.WindowLedger) -> Iterator[np.ndarray]:
        test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(2,), max_footprint=4)
        for secret in stream:
            answer = test.query(secret, bc.deviation, 1e9)  # never above: instances run to the cap
            self.opened.append(answer.opened[0].tolist())
            yield np.where(answer.opened, 1.0, 0.0)


def test_a_restart_replays_the_threshold_answers_and_then_opens_every_instance_afresh(tmp_path: Path) -> None:
    """Replayed queries get the stored answers (the releases built on them match the file); the first
    live query after them opens every instance, whose noisy threshold and footprint are not in the file."""
    text = rows(40)
    lines = text.splitlines(keepends=True)
    first = _Grouper()
    bc.publish(first, lines[:6], tmp_path / "l.db", dimensions=2, epsilon=1.0, w=5, out_path=tmp_path / "o.csv")
    assert first.opened == [[True, True], [False, False], [False, False], [False, False], [True, True], [False, False]]
    second = _Grouper()
    summary = bc.publish(
        second, lines[:9], tmp_path / "l.db", dimensions=2, epsilon=1.0, w=5, out_path=tmp_path / "o.csv"
    )
    assert second.opened[:6] == first.opened  # replayed from the file
    assert second.opened[6:] == [
        [True, True],
        [False, False],
        [False, False],
    ]  # t = 7 opens afresh, though t = 5's were open
    assert summary.published == 3 and bc.audit_file(tmp_path / "l.db").ok


POLICIES = "start,end,thresholds\n3,10,50,20\n8,20,30\n"


def invoke_swellfish(
    tmp_path: Path, text: str, mechanism: str, *extra: str, policies: str = POLICIES
) -> tuple[int, str]:
    (tmp_path / "policies.csv").write_text(policies)
    (tmp_path / "in.csv").write_text(text)
    result = CliRunner().invoke(
        main,
        [
            "publish",
            mechanism,
            "--ledger",
            str(tmp_path / "l.db"),
            "--epsilon",
            "1",
            "--policies",
            str(tmp_path / "policies.csv"),
            "-d",
            "2",
            "--input",
            str(tmp_path / "in.csv"),
            "--out",
            str(tmp_path / "out.csv"),
            "--durability",
            "process",
            *extra,
        ],
    )
    return result.exit_code, result.output


@pytest.mark.parametrize("mechanism", ["TSUniform", "TSBD", "TSBA", "UnicornPS", "UnicornIS", "Unicorn"])
def test_swellfish_mechanisms_publish_live_and_resume(tmp_path: Path, mechanism: str) -> None:
    """Policies from a file; timestamps no policy covers (1, 2 and after 20) are released exactly."""
    assert invoke_swellfish(tmp_path, rows(9), mechanism)[0] == 0
    code, output = invoke_swellfish(tmp_path, rows(24), mechanism)
    assert code == 0, output
    assert "replayed 9" in output
    lines = released(tmp_path)
    assert [int(line[0]) for line in lines] == list(range(1, 25))
    exact = {int(row.split(",")[0]): row.strip().split(",")[1:] for row in rows(24).splitlines()}
    assert all(line[1:] == exact[int(line[0])] for line in lines if int(line[0]) in (1, 2, 21, 22, 23, 24))
    assert bc.audit_file(tmp_path / "l.db").ok
    # Other policies on the same file are refused: they would change every past window's meaning.
    code, output = invoke_swellfish(tmp_path, rows(25), mechanism, policies="3,10,50\n")
    assert code in (2, 4) and "polic" in output.lower()


def test_swellfish_publisher_arguments_are_checked(tmp_path: Path) -> None:
    code, output = invoke_swellfish(tmp_path, rows(3), "TSBD", "--w", "5")
    assert code == 2 and "w comes from them" in output
    code, output = invoke(tmp_path, rows(3), mechanism="TSBD")
    assert code == 2 and "is a swellfish mechanism: give it epsilon and policies" in output
    code, output = invoke_swellfish(tmp_path, rows(3), "BD")
    assert code == 2 and "is a w-event mechanism: give it epsilon and w" in output
    (tmp_path / "users.csv").write_text("a,5,1.0\n")
    code, output = invoke_swellfish(tmp_path, rows(3), "PBD", "--requirements", str(tmp_path / "users.csv"))
    assert code == 2 and "not both" in output
    for text, message in (
        ("3,10\n", "line 1: expected start,end,theta_1"),
        ("# none\n", "lists no policies"),
        ("x,10,5\n", "start='x' and end='10' must be integers"),
        ("5,3,1\n", "line 1: policy interval"),
    ):
        code, output = invoke_swellfish(tmp_path, rows(3), "TSBD", policies=text)
        assert code == 2 and message in output, output


def test_swellfish_release_generators_match_the_batch_runs() -> None:
    from budgetcheck.ledger.policies import load_policies
    from mechanisms import TSBA, TSBD, TSSample, TSUniform, Unicorn, UnicornIS, UnicornPS

    data = np.abs(np.random.default_rng(1).normal(50, 10, size=(30, 2)))
    policies = load_policies(POLICIES.splitlines())
    for mechanism in (TSUniform(), TSSample(), TSBD(), TSBA(), UnicornPS(), UnicornIS(), Unicorn()):
        batch = bc.execute_swellfish(mechanism, policies, data, epsilon=1.0, runs=3, seed=5).releases
        ledger = bc.SwellfishLedger(policies, epsilon=1.0, runs=3, seed=5, sampler="numpy-laplace", keep_records=True)
        stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(data)), dimensions=2)
        ledger.bind(stream)
        live = np.stack(list(mechanism.releases(stream, ledger)), axis=1)
        np.testing.assert_array_equal(live, batch)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("3,1\n", "expected t and 2 counts, got 2 fields"),
        ("3,nan,1\n", "counts must be finite"),
        ("3,-1,1\n", "counts must be >= 0"),
        ("2,1,1\n", "t=2 does not increase"),
        ("x,1,1\n", "t='x' must be an integer from 1 to 2^62"),
        ("3,1.5,1\n", "the discrete sampler publishes integer counts"),
    ],
)
def test_bad_rows_are_rejected_with_their_number_and_nothing_is_lost(tmp_path: Path, bad: str, message: str) -> None:
    code, output = invoke(tmp_path, rows(2) + bad + rows(2, start=4))
    assert code == 2 and f"row 3: {message}" in output
    assert [int(line[0]) for line in released(tmp_path)] == [1, 2]
    code, output = invoke(tmp_path, rows(2) + bad + rows(2, start=4), "--skip-bad-rows")
    assert code == 0 and (
        "rejected row 3" in output or bad.startswith("2,")
    )  # t=2 was published before the restart: skipped
    assert [int(line[0]) for line in released(tmp_path)] == [1, 2, 4, 5]


def test_jsonl_input_and_output(tmp_path: Path) -> None:
    text = "".join(f'{{"t": {t}, "counts": [{t}, 2]}}\n' for t in range(1, 6))
    code, output = invoke(tmp_path, text, "--format", "jsonl", mechanism="Uniform")
    assert code == 0, output
    assert (tmp_path / "out.csv").read_text().count('"counts"') == 5  # the input's key


def test_publish_refuses_reproducible_noise_and_creates_nothing(tmp_path: Path) -> None:
    """numpy-laplace from default_rng([seed, session]) could be subtracted by anyone who knows both."""
    code, output = invoke(tmp_path, rows(3), "--sampler", "numpy-laplace")
    assert code == 2 and "reproducible noise" in output and "subtract" in output, output
    assert not (tmp_path / "l.db").exists() and not (tmp_path / "out.csv").exists()
    with pytest.raises(bc.InvalidArgument, match="reproducible noise"):
        bc.publish(
            bc.load_mechanism("BD"),
            rows(3).splitlines(),
            tmp_path / "l.db",
            dimensions=2,
            epsilon=1.0,
            w=5,
            out_path=tmp_path / "o.csv",
            sampler="numpy-laplace",
        )


def test_only_mechanisms_with_a_release_generator_publish(tmp_path: Path) -> None:
    code, output = invoke(tmp_path, rows(3), mechanism="mechanisms:FASTwAsPublished")
    assert code == 2 and "cannot publish live" in output


def test_release_generators_match_the_batch_runs() -> None:
    data = np.abs(np.random.default_rng(0).normal(50, 10, size=(40, 3)))
    for mechanism in (
        Uniform(),
        BD(),
        BA(),
        FASTw(),
        DSATw(sample_rate=0.15),
        RescueDP(),
        RescueDP(grouping=False),
        AdaPub(),
        PeGaSus(),
        PeGaSus(smoother="james-stein", grouping=False),
    ):
        batch = bc.execute(mechanism, data, epsilon=1.0, w=8, runs=3, seed=5).releases
        ledger = bc.WindowLedger(bc.WEventParams(1.0, 8), runs=3, seed=5, sampler="numpy-laplace", keep_records=True)
        stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(data)), dimensions=3)
        ledger.bind(stream)
        live = np.stack(list(mechanism.releases(stream, ledger)), axis=1)
        np.testing.assert_array_equal(live, batch)


def test_live_stream_checks_order_width_and_is_consumed_once() -> None:
    stream = bc.LiveStream([(1, [1.0]), (1, [2.0])], dimensions=1)
    iterator = iter(stream)
    next(iterator)
    with pytest.raises(bc.TimestampOrder):
        next(iterator)
    with pytest.raises(bc.InvalidArgument, match="once"):
        iter(stream)
    with pytest.raises(bc.InvalidArgument, match=r"row t=1 must have shape \(2,\), got shape \(1,\)"):
        list(bc.LiveStream([(1, [1.0])], dimensions=2))


def test_stand_ins_of_replayed_timestamps_cannot_be_read_live(tmp_path: Path) -> None:
    stream = bc.LiveStream([], dimensions=1, replayed=[1])
    ledger = bc.open_ledger(
        tmp_path / "x.db", bc.WindowLedger(bc.WEventParams(1.0, 3), sampler="numpy-laplace", keep_records=True)
    )
    ledger.bind(stream)
    (stand_in,) = list(stream)
    with pytest.raises(bc.LedgerCorrupt, match="replayed"):
        ledger.laplace(stand_in, 0.1)


def test_discrete_laplace_matches_its_distribution() -> None:
    scale = Fraction(3, 2)
    draws = Counter(discrete_laplace(scale) for _ in range(20000))
    q = np.exp(-1 / float(scale))
    for x in range(-3, 4):
        p = (1 - q) / (1 + q) * q ** abs(x)
        se = np.sqrt(p * (1 - p) / 20000)
        assert abs(draws[x] / 20000 - p) < 5 * se, (x, draws[x])
    hits = sum(bernoulli_exp(Fraction(7, 5)) for _ in range(20000))
    p = float(np.exp(-1.4))
    assert abs(hits / 20000 - p) < 5 * np.sqrt(p * (1 - p) / 20000)


def test_the_discrete_sampler_admits_integral_streams_at_bind_and_never_refuses_by_the_data() -> None:
    sampler = DiscreteLaplace()
    scale = sampler.scale(0.25, np.array([0.5]), integral=True)
    assert scale[0] > 0.5  # (Δ + γ)/ε covers the rounding to the grid
    out = sampler.perturb(np.array([0.3]), scale, 0.25, integral=True)
    assert (out[0] / 2.0**-22).is_integer()
    # Counts: the stream is checked when a discrete ledger binds it (the data owner's step), not at a release.
    with pytest.raises(bc.InvalidArgument, match="not integers"):
        bc.WindowLedger(
            bc.WEventParams(1.0, 2),
            sampler="discrete-laplace",
            keep_records=True,
            trusted_code=True,
            allow_vouched=True,
        ).bind(bc.GuardedStream(np.array([[1.0], [2.5]])))
    live = bc.LiveStream(iter([(1, [2.0]), (2, [2.5])]), dimensions=1)
    ledger = bc.WindowLedger(
        bc.WEventParams(1.0, 2), sampler="discrete-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(live)
    secrets = iter(live)
    assert float(ledger.laplace(next(secrets), 0.5)[0, 0]).is_integer()
    with pytest.raises(bc.InvalidArgument, match="row t=2 must hold integer counts"):
        next(secrets)
    # A measured fn may return anything: it goes on the fine grid (scale covers Δ + γ), never refused.
    stream = bc.GuardedStream(np.array([[1.0, 2.0]]))
    ledger = bc.WindowLedger(
        bc.WEventParams(1.0, 2), sampler="discrete-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stream)
    (secret,) = stream
    noisy = ledger.measure(lambda v: v.mean(), secret, sensitivity=1.0, epsilon=0.5)
    assert (noisy[0] / 2.0**-20).is_integer()
    assert ledger.records[-1].noise_scale is not None and ledger.records[-1].noise_scale[0] > 2.0


def test_stdout_delivery_is_at_least_once_across_a_restart(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    first = CliRunner().invoke(
        main, ["publish", "BD", "--ledger", str(ledger), *ARGS, "--durability", "process"], input=rows(6)
    )
    assert first.exit_code == 0, first.output
    printed = [line for line in first.stdout.splitlines() if line[:1].isdigit()]
    assert [int(line.split(",")[0]) for line in printed] == list(range(1, 7))
    # As if the process died after storing t=6 but before printing it: the restart prints it again first.
    again = CliRunner().invoke(
        main, ["publish", "BD", "--ledger", str(ledger), *ARGS, "--durability", "process"], input=rows(9)
    )
    assert again.exit_code == 0, again.output
    lines = [line for line in again.stdout.splitlines() if line[:1].isdigit()]
    assert lines[0] == printed[-1] and [int(line.split(",")[0]) for line in lines] == [6, 7, 8, 9]
    assert "rewrote 1" in again.output


def _wait_for_lines(path: Path, at_least: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= at_least:
            return
        time.sleep(0.005)


def user_rows(n: int, seed: int = 0) -> str:
    """Per-user rows t,user,bin for the users of REQUIREMENTS (some absent at each t, 3 bins), each
    timestamp closed by a row holding only t."""
    rng = random.Random(seed)
    return "".join(
        "".join(f"{t},{user},{rng.randrange(3)}\n" for user in ("ann", "bo", "cy", "di", "ed") if rng.random() < 0.7)
        + f"{t}\n"
        for t in range(1, n + 1)
    )


REQUIREMENTS = "user,w,epsilon\nann,4,1.0\nbo,8,2.0\ncy,4,1.0\ndi,2,0.5\ned,8,2.0\n"


def kill_and_restart(
    tmp_path: Path, kills: int, n: int, seed: int, *, personalized: bool = False, mechanism: str | None = None
) -> None:
    """Kill a publish run at random points (SIGKILL), restart until it finishes, then check it all:
    every t written exactly once and in order, each line equal to the release stored in the file's
    chain, one stored release per t, and the file's audit (every window of every notion) ok.

    ``mechanism``: any live built-in; personalized ones (or ``personalized``: PBA) read per-user rows
    (:func:`user_rows`), Swellfish ones POLICIES stretched over the whole stream."""
    name = mechanism or ("PBA" if personalized else "BD")
    notion = bc.load_mechanism(name).notion if hasattr(bc.load_mechanism(name), "notion") else "w-event"
    source = tmp_path / "in.csv"
    out, ledger = tmp_path / "out.csv", tmp_path / "l.db"
    if notion == "personalized":
        source.write_text(user_rows(n, seed))
        (tmp_path / "req.csv").write_text(REQUIREMENTS)
        args = [name, "--requirements", str(tmp_path / "req.csv"), "-d", "3"]
    elif notion == "swellfish":
        source.write_text(rows(n))
        (tmp_path / "policies.csv").write_text(f"start,end,thresholds\n1,{n // 2},50,20\n{n // 3},{n},30\n")
        args = [name, "--epsilon", "1", "--policies", str(tmp_path / "policies.csv"), "-d", "2"]
    else:
        source.write_text(rows(n))
        args = [name, *ARGS]
    command = [
        sys.executable,
        "-c",
        "from budgetcheck.cli import main; main()",
        "publish",
        *args,
        "--ledger",
        str(ledger),
        "--input",
        str(source),
        "--out",
        str(out),
    ]
    rng = random.Random(seed)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for _ in range(kills):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = out.read_bytes().count(b"\n") if out.exists() else 0
        _wait_for_lines(out, done + rng.randint(0, 3), time.monotonic() + 20)
        time.sleep(rng.uniform(0, 0.02))
        process.send_signal(signal.SIGKILL)
        process.wait()
    finished = subprocess.run(command, env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    lines = out.read_text().splitlines()
    assert [int(line.split(",")[0]) for line in lines] == list(range(1, n + 1))  # each exactly once
    db = sqlite3.connect(ledger)
    releases = db.execute("SELECT t, output FROM records WHERE kind = 1 ORDER BY t").fetchall()
    db.close()
    assert [t for t, _ in releases] == list(range(1, n + 1))
    for line, (t, blob) in zip(lines, releases, strict=True):  # what was written is what the chain holds
        assert [float(v) for v in line.split(",")[1:]] == decode_array(blob, "release").ravel().tolist(), t
    report = bc.audit_file(ledger)
    assert report.ok, report


# one publisher per notion on every run (and the adaptive Unicorn); the rest under slow
LIVE = [
    "BD",
    "PBD",
    "TSBD",
    "Unicorn",
    *(
        pytest.param(name, marks=pytest.mark.slow)
        for name in ["PBA", "StrictestBD", "StrictestBA", "TSBA", "UnicornPS"]
    ),
]


@pytest.mark.parametrize("mechanism", LIVE)
def test_every_notions_publisher_survives_kills(tmp_path: Path, mechanism: str) -> None:
    kill_and_restart(tmp_path, kills=2, n=24, seed=len(mechanism), mechanism=mechanism)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", LIVE)
def test_every_notions_publisher_survives_many_kills(tmp_path: Path, mechanism: str) -> None:
    kill_and_restart(tmp_path, kills=25, n=120, seed=3 + len(mechanism), mechanism=mechanism)


def test_killed_publish_runs_resume_without_double_releases(tmp_path: Path) -> None:
    kill_and_restart(tmp_path, kills=8, n=60, seed=1)
