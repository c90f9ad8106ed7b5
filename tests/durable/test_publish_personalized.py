"""budgetcheck publish for the personalized notion: per-user rows, a requirements file, PBD/PBA live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_publish import REQUIREMENTS, kill_and_restart, user_rows

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.stream.events import load_requirements, parse_events, timestamps
from mechanisms import PBA, PBD, Uniform

REQ = load_requirements(REQUIREMENTS.splitlines())


def invoke(
    tmp_path: Path, text: str, *extra: str, mechanism: str = "PBD", requirements: str = REQUIREMENTS
) -> tuple[int, str]:
    (tmp_path / "in.csv").write_text(text)
    (tmp_path / "req.csv").write_text(requirements)
    result = CliRunner().invoke(
        main,
        [
            "publish",
            mechanism,
            "--ledger",
            str(tmp_path / "l.db"),
            "--requirements",
            str(tmp_path / "req.csv"),
            "-d",
            "3",
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


def published_ts(tmp_path: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in (tmp_path / "out.csv").read_text().splitlines()]


def test_requirements_file_gives_each_named_user_a_class() -> None:
    assert REQ.n_users == 5 and REQ.n_classes == 3
    assert REQ.class_of("bo") == bc.Requirement(8, 2.0) and REQ.class_of("di") == bc.Requirement(2, 0.5)
    assert REQ.users == ("ann", "bo", "cy", "di", "ed")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ann,4\n", "line 1: expected user,w,epsilon"),
        ("ann,4,1\nann,2,1\n", "line 2: user 'ann' is listed twice"),
        ("ann,four,1\n", "line 1: w='four' must be an integer"),
        ("ann,0,1\n", "w"),
        ("ann,4,-1\n", "epsilon"),
        ("# nobody\n", "lists no users"),
    ],
)
def test_bad_requirements_files_are_refused_by_line(text: str, message: str) -> None:
    with pytest.raises(bc.InvalidArgument, match=message):
        load_requirements(text.splitlines(), source="req.csv")


def test_events_are_grouped_into_counts_per_class_and_bin() -> None:
    text = "1,ann,0\n1,bo,2\n1,cy,0\n2,di,1\n4\n5,ed,2\n"
    groups = list(timestamps(parse_events(text.splitlines(), fmt="csv"), REQ, dimensions=3, published=0, skip=_raise))
    assert [t for t, _ in groups] == [1, 2, 4, 5]
    classes = REQ.classes  # sorted: (2, 0.5), (4, 1.0), (8, 2.0)
    assert classes[1] == bc.Requirement(4, 1.0)
    np.testing.assert_array_equal(groups[0][1], [[0, 0, 0], [2, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(groups[1][1], [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(groups[2][1], np.zeros((3, 3)))  # closed with no events
    np.testing.assert_array_equal(groups[3][1], [[0, 0, 0], [0, 0, 0], [0, 0, 1]])
    jsonl = '{"t": 1, "user": "ann", "bin": 0}\n{"t": 1}\n{"t": 3, "user": "bo", "bin": 1}\n'
    assert [
        t
        for t, _ in timestamps(
            parse_events(jsonl.splitlines(), fmt="jsonl"), REQ, dimensions=3, published=1, skip=_raise
        )
    ] == [3]


def _raise(error: bc.InvalidArgument) -> None:
    raise error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,ann,0\n1,zed,1\n", "row 2: user 'zed' is not in the requirements file"),
        ("1,ann,3\n", "row 1: bin=3 must be in"),
        ("1,ann,-1\n", "row 1: bin='-1' must be a non-negative integer"),
        ("1,ann,0\n1,ann,1\n", "row 2: user 'ann' already has a bin at t=1"),
        ("2,ann,0\n1,bo,0\n", "row 2: t=1 comes after t=2"),
        ("1,ann,0\n1\n1,bo,0\n", "row 3: t=1 comes after t=1"),
        ("1,ann\n", "row 1: expected t,user,bin"),
        ("0,ann,1\n", "row 1: t='0' must be an integer from 1 to 2^62"),
    ],
)
def test_bad_user_rows_stop_the_publisher_naming_the_row(tmp_path: Path, text: str, message: str) -> None:
    code, output = invoke(tmp_path, text)
    assert code == 2 and message in output, output
    lines = (tmp_path / "out.csv").read_text().splitlines() if (tmp_path / "out.csv").exists() else []
    assert all(int(line.split(",")[0]) < 2 for line in lines)  # only complete timestamps before the bad row


def test_skip_bad_rows_drops_only_the_bad_events(tmp_path: Path) -> None:
    code, output = invoke(tmp_path, "1,ann,0\n1,zed,1\n1,bo,7\n2,cy,1\n2\n", "--skip-bad-rows")
    assert code == 0, output
    assert "rejected row 2" in output and "rejected row 3" in output and "rejected 2" in output
    assert published_ts(tmp_path) == [1, 2]


def test_personalized_publish_audits_and_resumes_after_a_restart(tmp_path: Path) -> None:
    full = user_rows(40, seed=3)
    head = full[: full.index("\n21\n") + 4]  # timestamps 1..21, each closed
    assert invoke(tmp_path, head)[0] == 0
    assert published_ts(tmp_path) == list(range(1, 22))
    code, output = invoke(tmp_path, full)
    assert code == 0, output
    assert "replayed 21" in output and "published 19 timestamps" in output
    assert published_ts(tmp_path) == list(range(1, 41))
    report = bc.audit_file(tmp_path / "l.db")
    assert report.ok and report.notion == "personalized" and report.checked == 40 * 3
    assert 0.5 < report.worst_ratio <= 1  # PBD fills user windows, never beyond


def test_a_changed_requirements_file_or_notion_is_refused(tmp_path: Path) -> None:
    assert invoke(tmp_path, user_rows(5))[0] == 0
    swapped = REQUIREMENTS.replace("ann,4,1.0", "ann,8,2.0").replace("bo,8,2.0", "bo,4,1.0")  # same classes and counts
    code, output = invoke(tmp_path, user_rows(8), requirements=swapped)
    assert code == 2 and "was written with publisher" in output, output
    code, output = invoke(tmp_path, user_rows(8), mechanism="Uniform")
    assert code == 2 and "is a w-event mechanism" in output, output
    code, output = invoke(tmp_path, user_rows(8), "--sampler", "numpy-laplace")
    assert code == 2 and "reproducible noise" in output, output
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "PBD",
            "--ledger",
            str(tmp_path / "x.db"),
            "--epsilon",
            "1",
            "--w",
            "3",
            "--out",
            str(tmp_path / "x.csv"),
        ],
        input="1,ann,0\n",
    )
    assert result.exit_code == 2 and "is a personalized mechanism" in result.output


def test_library_publish_refuses_mixed_parameters(tmp_path: Path) -> None:
    with pytest.raises(bc.InvalidArgument, match="takes w and epsilon per user"):
        bc.publish(
            PBD(), [], tmp_path / "l.db", dimensions=3, requirements=REQ, epsilon=1.0, w=4, out_path=tmp_path / "o"
        )
    with pytest.raises(bc.InvalidArgument, match="needs epsilon and w"):
        bc.publish(Uniform(), [], tmp_path / "l.db", dimensions=3, epsilon=1.0, out_path=tmp_path / "o")


@pytest.mark.parametrize("mechanism", [PBD(), PBA(), PBD(strictest=True), PBA(strictest=True)])
def test_live_generators_equal_the_batch_runs(mechanism: PBD | PBA) -> None:
    rng = np.random.default_rng(5)
    bins = rng.integers(-1, 3, size=(30, REQ.n_users))
    batch = mechanism.run(
        bc.PersonalizedStream(REQ, bins, dimensions=3),
        bc.PersonalizedLedger(REQ, runs=3, seed=9, sampler="numpy-laplace"),
    )
    stream = bc.PersonalizedStream(REQ, bins, dimensions=3)
    ledger = bc.PersonalizedLedger(REQ, runs=3, seed=9, sampler="numpy-laplace")
    live = np.stack(list(mechanism.releases(stream, ledger)), axis=1)
    np.testing.assert_array_equal(live, batch)


def test_killed_personalized_publish_runs_resume_without_double_releases(tmp_path: Path) -> None:
    kill_and_restart(tmp_path, kills=5, n=40, seed=2, personalized=True)
