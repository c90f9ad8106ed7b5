"""Faults of a durable ledger tried from outside (issue 42, items 5 and 6): a forged row far behind the head
is caught at open, and every damaged file, unencodable argument and unreadable URL gets an error of the
right kind (LedgerCorrupt / exit 4 for a damaged ledger, InvalidArgument / exit 2 for a bad argument) with
no password anywhere on the exception's chain."""

from __future__ import annotations

import hashlib
import math
import os
import traceback
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.journal import ROW_COLUMNS, open_store, row_hash
from budgetcheck.durable.postgres import with_ledger

PARAMS = bc.WEventParams(epsilon=1.0, w=4)


@pytest.fixture(scope="module")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server of this module's own (the dev extra's pgserver), as a URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import pgserver

        server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    yield str(server.get_uri())


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "l.db")
    return with_ledger(request.getfixturevalue("pg_url"), f"f_{uuid.uuid4().hex[:16]}")


def ledger(target: str) -> bc.WindowLedger:
    return bc.open_ledger(target, bc.WindowLedger(PARAMS, keep_records=True))


def forge_amount(target: str, t: int, value: float) -> None:
    """As a forger who holds the store: set the amount of the spend at t, recompute the whole chain and head."""
    store = open_store(target)
    try:
        if target.startswith("postgresql://"):
            store.execute("ALTER TABLE records DISABLE TRIGGER records_no_update")
        else:
            store.execute("DROP TRIGGER records_no_update")
        header = store.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()[0]
        previous = hashlib.sha256(header.encode()).digest()
        for row in store.execute(f"SELECT {ROW_COLUMNS} FROM records ORDER BY seq").fetchall():
            seq, version, kind, op, t_row, amounts, detail, output, _ = row
            amounts = bytes(amounts)
            if t_row == t and kind == 0:
                amounts = np.array([value], dtype="<f8").tobytes()
            output = None if output is None else bytes(output)
            previous = row_hash(previous, version, kind, seq, op, t_row, amounts, detail.encode(), output)
            store.execute("UPDATE records SET amounts = ?, hash = ? WHERE seq = ?", (amounts, previous, seq))
        store.execute("UPDATE head SET hash = ? WHERE id = 1", (previous,))
    finally:
        store.close()


# -- item 5: old forged rows ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-5.0, math.nan, math.inf])
def test_a_forged_amount_far_behind_the_head_is_corrupt_at_open(store: str, value: float) -> None:
    """A negative, NaN or infinite amount at t = 5 of 40 (chain recomputed): the audit and the open agree."""
    with ledger(store) as kept:
        for t in range(1, 41):
            kept.spend(t, 0.1, purpose="x")
    forge_amount(store, 5, value)
    assert CliRunner().invoke(main, ["audit", store]).exit_code == 4
    with pytest.raises(bc.LedgerCorrupt, match=r"record 5: amounts .* must be finite and >= 0"):
        ledger(store)


def test_an_intact_long_ledger_still_opens_and_spends(tmp_path: Path) -> None:
    """Checking the old rows refuses nothing the writer wrote (thousands of rows, several batches)."""
    path = str(tmp_path / "l.db")
    with bc.open_ledger(path, bc.WindowLedger(PARAMS), durability="process") as kept:
        for t in range(1, 9001):
            kept.spend(t, 0.2 if t % 2 else 0.05, purpose="even" if t % 2 else "odd")
    with bc.open_ledger(path, bc.WindowLedger(PARAMS)) as reopened:
        reopened.spend(9001, 0.2, purpose="x")
        assert float(reopened.remaining(9001)[0]) == pytest.approx(1.0 - 0.2 - 0.05 - 0.2 - 0.05)


# -- item 6: errors of the right kind --------------------------------------------------------------------


def _made(tmp_path: Path) -> bytes:
    path = tmp_path / "made.db"
    with ledger(str(path)) as kept:
        kept.spend(1, 0.1, purpose="x")
    return path.read_bytes()


def test_every_flipped_bit_in_the_schema_text_is_corrupt_not_an_internal_error(tmp_path: Path) -> None:
    """High bit flipped in each byte of the stored schema: open raises LedgerCorrupt (or opens: a flip SQLite
    does not notice), audit exits 4 (or 0), never a UnicodeDecodeError / exit 70."""
    data = _made(tmp_path)
    end = int.from_bytes(data[16:18], "big")  # the schema's rows fill page 1 from its end
    start = data.index(b"CREATE ", 100, end)
    target = tmp_path / "flipped.db"
    kinds: set[str] = set()
    for offset in range(start, end):
        flipped = bytearray(data)
        flipped[offset] ^= 0x80
        for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            leftover.unlink(missing_ok=True)
        target.write_bytes(bytes(flipped))
        try:
            ledger(str(target)).close()
            kinds.add("opened")
        except bc.LedgerCorrupt as exc:
            kinds.add("corrupt" + (" (utf-8)" if "utf-8" in str(exc) else ""))
        result = CliRunner().invoke(main, ["audit", str(target)])
        assert result.exit_code in (0, 4), (offset, result.exit_code, result.output)
    assert "corrupt (utf-8)" in kinds, kinds  # the flips that used to escape as UnicodeDecodeError


@pytest.mark.parametrize("content", [b"", b"SQLite format 2\x00" + bytes(range(256)) * 8], ids=["empty", "bad-magic"])
def test_an_empty_or_binary_file_is_corrupt_for_audit_and_open(tmp_path: Path, content: bytes) -> None:
    """A file a ledger could have been (empty, or binary without the SQLite magic): exit 4 from audit, as
    LedgerCorrupt from open_ledger."""
    path = tmp_path / "l.db"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["audit", str(path)])
    assert result.exit_code == 4, result.output
    assert "not a budgetcheck ledger file" in result.output
    with pytest.raises(bc.LedgerCorrupt, match="not a budgetcheck ledger file"):
        ledger(str(path))


def test_a_flipped_first_byte_of_a_real_ledger_is_corrupt_for_audit(tmp_path: Path) -> None:
    data = bytearray(_made(tmp_path))
    data[0] ^= 1
    (tmp_path / "l.db").write_bytes(bytes(data))
    assert CliRunner().invoke(main, ["audit", str(tmp_path / "l.db")]).exit_code == 4


def test_a_text_file_that_is_no_export_stays_a_usage_error(tmp_path: Path) -> None:
    """The other side of the rule: intact text that is not an exported log is the wrong file (exit 2)."""
    (tmp_path / "rows.csv").write_text("1,2,3\n")
    assert CliRunner().invoke(main, ["audit", str(tmp_path / "rows.csv")]).exit_code == 2


def _count(target: str) -> int:
    store = open_store(target)
    try:
        return int(store.execute("SELECT count FROM head WHERE id = 1").fetchone()[0])
    finally:
        store.close()


@pytest.mark.parametrize("where", ["purpose", "operation_id"])
def test_a_lone_surrogate_is_refused_by_name_before_anything_is_written(store: str, where: str) -> None:
    kept = ledger(store)
    kept.spend(1, 0.1, purpose="first")
    with pytest.raises(bc.InvalidArgument, match=rf"^{where}=.*surrogate"):
        if where == "purpose":
            kept.spend(2, 0.1, purpose="pay\udc80load")
        else:
            with kept.idempotent("request-\ud800"):
                kept.spend(2, 0.1, purpose="x")
    assert _count(store) == 1
    kept.spend(2, 0.1, purpose="after")  # the ledger and its store are intact
    kept.close()
    assert _count(store) == 2
    assert bc.audit_file(store).ok


BAD_URLS = [
    "postgresql://u:sekret@localhost:abc/db",
    "postgresql://u:sekret@localhost/db?port=abc",
    "postgresql://u:sekret@localhost/db?port=99999",
    "postgresql://u:sekret@localhost/db?no_such_option=1",
    "postgresql://u:sekret@localhost/db?options=%zz",
    "postgresql://u:s%zzekret@localhost/db",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_url_the_driver_cannot_read_is_a_usage_error(url: str, tmp_path: Path) -> None:
    with pytest.raises(bc.InvalidArgument, match="ledger URL"):
        ledger(url)
    result = CliRunner().invoke(main, ["audit", url])
    assert result.exit_code == 2, result.output
    (tmp_path / "in.csv").write_text("1,5\n")
    result = CliRunner().invoke(
        main, ["publish", "BD", "--ledger", url, "--epsilon", "1", "--w", "4", "--input", str(tmp_path / "in.csv")]
    )
    assert result.exit_code == 2, result.output
    assert "sekret" not in result.output


def _chain_text(exc: BaseException) -> str:
    """Every string reachable from ``exc``: each exception of its __cause__ / __context__ chain (suppressed or
    not), its args and notes, and the formatted traceback of each."""
    texts, seen, todo = [], set(), [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), *map(str, current.args), *getattr(current, "__notes__", [])]
        texts += traceback.format_exception(type(current), current, current.__traceback__, chain=False)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
    return "\n".join(texts)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s%zzekret@localhost/db",  # the driver quotes the password it cannot decode
        "postgresql://u:sekret%21@127.0.0.1:1/db",  # nothing listens on port 1
        "postgresql://u@127.0.0.1:1/db?password=sekret%21",
    ],
)
def test_no_password_anywhere_on_the_exception_chain(url: str) -> None:
    with pytest.raises(bc.BudgetcheckError) as caught:
        ledger(url)
    text = _chain_text(caught.value)
    for secret in ("sekret", "s%zzekret", urllib.parse.unquote("sekret%21")):
        assert secret not in text, text


def test_percent_escapes_in_parameters_reach_the_driver_as_written(pg_url: str, tmp_path: Path) -> None:
    """``options=-c%20geqo%3Doff`` and a socket directory with a space: %20 must not become '+'."""
    host = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)["host"][0]
    spaced = tmp_path / "socket dir"
    os.symlink(host, spaced)
    base = pg_url.split("?")[0]
    url = f"{base}?host={urllib.parse.quote(str(spaced))}&options=-c%20geqo%3Doff&ledger=f_{uuid.uuid4().hex[:12]}"
    assert "%20" in url
    with ledger(url) as kept:
        kept.spend(1, 0.25, purpose="x")
    store = open_store(url)
    try:
        assert store.execute("SHOW geqo").fetchone()[0] == "off"
    finally:
        store.close()
    assert bc.audit_file(url).ok
