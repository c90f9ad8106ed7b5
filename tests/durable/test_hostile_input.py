"""A fixed corpus of hostile publisher input (issue 27, item 5): binary bytes, text that is not
UTF-8, JSON nested 10^5 deep, 5,000-digit integers, 1e400, -0, NaN/Infinity tokens, 10 MB lines,
CRLF and a byte-order mark, in every row format of ``budgetcheck publish`` and in its requirements
and policy files. Each bad row stops the run with exit 2 naming its row (nothing released for it),
or is skipped with ``--skip-bad-rows``; a bad requirements or policy file is exit 2 naming its line.
Never a traceback. Documented choices: CRLF line ends are read like LF, a BOM at the start of the
input is dropped, a count of -0 is the count 0 (a t of -0 is refused: t starts at 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main

BINARY = bytes(b for b in range(256) if b not in b"\n\r")  # one line: NUL, control bytes and 0x80..0xff (not UTF-8)
TEN_MB = b"9" * 10_000_000
REQUIREMENTS = "ann,2,1.0\nbo,3,1.0\n"

# tokens put where a number belongs: each makes the row bad
TOKENS = {
    "5000 digits": b"9" * 5000,
    "1e400": b"1e400",
    "NaN": b"NaN",
    "Infinity": b"Infinity",
    "-Infinity": b"-Infinity",
    "NUL": b"1\x00",
    "not UTF-8": b"\xff\xfe1",
    "truncated UTF-8": b"\xc3",
    "half a surrogate": b"\xed\xa0\x80",
}
T_TOKENS = {**TOKENS, "-0": b"-0", "0": b"0", "2^62 + 1": str(2**62 + 1).encode(), "3.5": b"3.5", "true": b"true"}
WHOLE_LINES = {  # rows that are bad as a whole
    "binary": BINARY,
    "nested 10^5 deep": b"[" * 100_000 + b"]" * 100_000,
    "nested 30,000 deep": b"[" * 30_000 + b"]" * 30_000,  # within the row limit: reaches the JSON parser
    "objects nested": b'{"t":' * 20_000 + b"1" + b"}" * 20_000,
    "10 MB": TEN_MB,
    "10 MB of commas": b"2" + b",1" * 5_000_000,
}


def row(notion: str, fmt: str, t: bytes, value: bytes) -> bytes:
    """A row of the given format: t and a value in its number's place (a count, or a bin)."""
    if notion == "w-event":
        return t + b"," + value + b",1" if fmt == "csv" else b'{"t": ' + t + b', "counts": [' + value + b", 1]}"
    return t + b",ann," + value if fmt == "csv" else b'{"t": ' + t + b', "user": "ann", "bin": ' + value + b"}"


def good(notion: str, fmt: str, t: int) -> bytes:
    return row(notion, fmt, str(t).encode(), b"1")


def bad_rows() -> list[tuple[str, str, str, bytes]]:
    cases = []
    for notion in ("w-event", "personalized"):
        for fmt in ("csv", "jsonl"):
            cases += [(notion, fmt, f"value {name}", row(notion, fmt, b"2", token)) for name, token in TOKENS.items()]
            cases += [(notion, fmt, f"t {name}", row(notion, fmt, token, b"1")) for name, token in T_TOKENS.items()]
            cases += [(notion, fmt, name, line) for name, line in WHOLE_LINES.items()]
    return cases


def command(tmp_path: Path, notion: str, fmt: str, *extra: str) -> list[str]:
    mechanism = (
        ["BD", "--epsilon", "1", "--w", "3"]
        if notion == "w-event"
        else ["PBD", "--requirements", str(tmp_path / "users.csv")]
    )
    (tmp_path / "users.csv").write_text(REQUIREMENTS)
    return [
        "publish",
        *mechanism,
        "--ledger",
        str(tmp_path / "l.db"),
        "-d",
        "2",
        "--format",
        fmt,
        "--durability",
        "process",
        *extra,
    ]


def published(path: Path) -> list[str]:
    return (
        [
            line.split(",")[0] if line[:1] != "{" else line.split(",")[0].split(":")[1].strip()
            for line in path.read_text().splitlines()
        ]
        if path.exists()
        else []
    )


@pytest.mark.parametrize(("notion", "fmt", "name", "line"), bad_rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_row_stops_or_is_skipped_never_a_traceback(
    tmp_path: Path, notion: str, fmt: str, name: str, line: bytes
) -> None:
    data = good(notion, fmt, 1) + b"\n" + line + b"\n" + good(notion, fmt, 3) + b"\n"
    (tmp_path / "in").write_bytes(data)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, command(tmp_path, notion, fmt, "--input", str(tmp_path / "in"), "--out", str(out))
    )
    assert result.exit_code == 2, (name, result.output[-400:])
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "row 2" in result.output and "Traceback" not in result.output, result.output[-400:]
    assert published(out) in ([], ["1"])  # nothing of row 2 or after it
    assert bc.audit_file(tmp_path / "l.db").ok
    again = CliRunner().invoke(
        main, command(tmp_path, notion, fmt, "--input", str(tmp_path / "in"), "--out", str(out), "--skip-bad-rows")
    )
    assert again.exit_code == 0, (name, again.output[-400:])
    assert "rejected row 2" in again.output and "Traceback" not in again.output
    assert published(out) == ["1", "3"]
    assert bc.audit_file(tmp_path / "l.db").ok


@pytest.mark.parametrize("notion", ["w-event", "personalized"])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_crlf_a_leading_bom_and_a_count_of_minus_zero_are_read(tmp_path: Path, notion: str, fmt: str) -> None:
    data = (
        b"\xef\xbb\xbf"
        + b"\r\n".join(
            [good(notion, fmt, 1), row(notion, fmt, b"2", b"-0" if notion == "w-event" else b"0"), good(notion, fmt, 3)]
        )
        + b"\r\n"
    )
    (tmp_path / "in").write_bytes(data)
    result = CliRunner().invoke(
        main, command(tmp_path, notion, fmt, "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out"))
    )
    assert result.exit_code == 0, result.output
    assert published(tmp_path / "out") == ["1", "2", "3"]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_bom_after_the_start_is_a_bad_row(tmp_path: Path, fmt: str) -> None:
    (tmp_path / "in").write_bytes(good("w-event", fmt, 1) + b"\n\xef\xbb\xbf" + good("w-event", fmt, 2) + b"\n")
    result = CliRunner().invoke(
        main, command(tmp_path, "w-event", fmt, "--input", str(tmp_path / "in"), "--out", str(tmp_path / "o"))
    )
    assert result.exit_code == 2 and "row 2" in result.output, result.output


def run_stdin(tmp_path: Path, notion: str, data: bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(bc.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "budgetcheck", *command(tmp_path, notion, "csv", *extra)],
        input=data,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("binary", BINARY),
        ("not UTF-8", b"2,\xff\xfe,1"),
        ("10 MB", TEN_MB),
        ("5000 digits", b"2," + b"9" * 5000 + b",1"),
    ],
)
def test_stdin_bytes_through_a_real_process(tmp_path: Path, name: str, line: bytes) -> None:
    """The command as a user runs it: stdin is bytes, not text that a test harness decoded."""
    data = b"1,1,1\n" + line + b"\n3,1,1\n"
    stopped = run_stdin(tmp_path, "w-event", data)
    assert stopped.returncode == 2, stopped.stderr[-400:]
    assert b"row 2" in stopped.stderr and b"Traceback" not in stopped.stderr + stopped.stdout
    assert stopped.stdout.split(b",")[0] == b"1"
    if name == "not UTF-8":
        assert b"not UTF-8" in stopped.stderr
    skipped = run_stdin(tmp_path, "w-event", data, "--skip-bad-rows")
    assert skipped.returncode == 0, skipped.stderr[-400:]
    assert b"rejected row 2" in skipped.stderr and b"Traceback" not in skipped.stderr
    assert [r.split(b",")[0] for r in skipped.stdout.splitlines()] == [
        b"1",
        b"3",
    ]  # t = 1 again: stdout is at least once


FILE_CORPUS = {
    "binary": BINARY,
    "not UTF-8": b"\xff\xfe",
    "NUL": b"\x00",
    "5000 digits": b"9" * 5000,
    "1e400": b"1e400",
    "NaN": b"NaN",
    "-Infinity": b"-Infinity",
    "10 MB": TEN_MB,
}


@pytest.mark.parametrize("name", sorted(FILE_CORPUS))
@pytest.mark.parametrize("kind", ["requirements w", "requirements epsilon", "policy end", "policy theta"])
def test_bad_requirements_and_policy_files_are_usage_errors(tmp_path: Path, kind: str, name: str) -> None:
    token = FILE_CORPUS[name]
    lines = {
        "requirements w": b"ann,2,1\nbo," + token + b",1\n",
        "requirements epsilon": b"ann,2,1\nbo,2," + token + b"\n",
        "policy end": b"1,3,1\n1," + token + b",1\n",
        "policy theta": b"1,3,1\n1,3," + token + b"\n",
    }[kind]
    (tmp_path / "file.csv").write_bytes(lines)
    (tmp_path / "in").write_bytes(b"1,ann,0\n" if kind.startswith("requirements") else b"1,1,1\n")
    args = (
        ["PBD", "--requirements", str(tmp_path / "file.csv")]
        if kind.startswith("requirements")
        else ["TSBD", "--epsilon", "1", "--policies", str(tmp_path / "file.csv")]
    )
    result = CliRunner().invoke(
        main,
        [
            "publish",
            *args,
            "--ledger",
            str(tmp_path / "l.db"),
            "-d",
            "2",
            "--input",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "out"),
            "--durability",
            "process",
        ],
    )
    assert result.exit_code == 2, (kind, name, result.output[-400:])
    assert "line 2" in result.output and "Traceback" not in result.output, (kind, name, result.output[-400:])
    assert len(result.output) < 2000  # the message shows the value, not all 10 MB of it
    assert not (tmp_path / "l.db").exists()  # refused before the ledger file was made


def test_a_5000_digit_w_is_refused_before_any_mechanism_runs(tmp_path: Path) -> None:
    """A w of 10^4000 from a requirements file hung the mechanism (it keeps state per timestamp of a window)."""
    (tmp_path / "users.csv").write_text("ann," + "9" * 4000 + ",1\n")
    (tmp_path / "in").write_text("1,ann,0\n")
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "PBD",
            "--requirements",
            str(tmp_path / "users.csv"),
            "--ledger",
            str(tmp_path / "l.db"),
            "-d",
            "2",
            "--input",
            str(tmp_path / "in"),
        ],
    )
    assert result.exit_code == 2 and "w=" in result.output and "live publisher" in result.output, result.output[-300:]
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "BD",
            "--epsilon",
            "1",
            "--w",
            str(2**40),
            "--ledger",
            str(tmp_path / "m.db"),
            "-d",
            "2",
            "--input",
            str(tmp_path / "in"),
        ],
    )
    assert result.exit_code == 2 and "w=1099511627776" in result.output, result.output[-300:]
