"""The rewrite campaign: signed checkpoints catch a rewrite by someone who holds the store but not the key.

Written from outside (the public API, the CLI, and raw SQL as the store's own user or a superuser who
drops the append-only triggers and recomputes the hash chain and the head). Each rewrite the issue
names is run on an SQLite file and on a PostgreSQL ledger: the header's ε changed to 100, truncation
to genesis, a rollback to an earlier head, a forged appended release, deleted checkpoint rows and a
checkpoint replaced by one signed with another key. Each is detected by ``budgetcheck audit --key``
(exit 4) and by ``open_ledger(..., verify_key=...)`` (LedgerCorrupt); the plain audit, which has no key,
passes the recomputed rewrites (the honest truth: without a key a recomputed chain is a valid chain).
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.checkpoint import DOMAIN, fingerprint
from budgetcheck.durable.journal import ROW_COLUMNS, canonical, encode_array, is_url, open_store, row_hash

PARAMS = bc.WEventParams(epsilon=1.0, w=4)
EVERY = 5
SPENDS = 23  # checkpoints at 0, 5, 10, 15, 20 and, at close, 23


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """(private, public) PEM files of a new key pair."""
    bc.generate_keys(tmp_path / "ledger.key", tmp_path / "ledger.pub")
    return tmp_path / "ledger.key", tmp_path / "ledger.pub"


def signed_ledger(target: str, private: Path, spends: int = SPENDS) -> None:
    """A ledger written by a signer: one spend of 0.2 per timestamp, a checkpoint every EVERY records."""
    ledger = bc.open_ledger(target, bc.WindowLedger(PARAMS), signing_key=private, checkpoint_every=EVERY)
    for t in range(1, spends + 1):
        ledger.spend(t, 0.2, purpose="s")
    ledger.close()


def sql(target: str, *statements: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run statements on the store as its owner would (autocommit); the last one's rows."""
    db = open_store(target)
    rows: list[Any] = []
    try:
        for statement in statements:
            with db.guard("tamper"):
                cursor = db.execute(statement, params if statement is statements[-1] else ())
                try:
                    rows = list(cursor.fetchall())
                except Exception:  # noqa: BLE001 — a statement without rows
                    rows = []
    finally:
        db.close()
    return rows


def drop_guards(target: str) -> None:
    """What a superuser (or the file's owner) does first: drop the append-only triggers."""
    if is_url(target):
        sql(
            target,
            "DROP TRIGGER IF EXISTS records_no_update ON records",
            "DROP TRIGGER IF EXISTS records_no_truncate ON records",
        )
    else:
        sql(target, "DROP TRIGGER IF EXISTS records_no_update", "DROP TRIGGER IF EXISTS records_no_delete")


def rechain(target: str) -> None:
    """Recompute every row's hash from the stored header and set the head: the keyless chain then passes."""
    db = open_store(target)
    try:
        (text,) = db.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()
        previous = hashlib.sha256(canonical(json.loads(text))).digest()
        rows = db.execute(f"SELECT {ROW_COLUMNS} FROM records ORDER BY seq").fetchall()
        for seq, version, kind, op, t, amounts, detail, output, _ in rows:
            previous = row_hash(previous, version, kind, seq, op, t, bytes(amounts), detail.encode(), output)
            db.execute("UPDATE records SET hash = ? WHERE seq = ?", (previous, seq))
        db.execute("UPDATE head SET count = ?, hash = ? WHERE id = 1", (len(rows), previous))
    finally:
        db.close()


def cli_audit(target: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["audit", target, *extra])
    return result.exit_code, result.output


def detected(target: str, public: Path, ledger: bc.WindowLedger | None = None) -> str:
    """The rewrite is found by audit --key (exit 4) and by open_ledger(verify_key=...); the finding."""
    code, output = cli_audit(target, "--key", str(public))
    assert code == 4, output
    assert "checkpoints: BROKEN" in output, output
    with pytest.raises(bc.LedgerCorrupt) as found:
        bc.open_ledger(target, ledger if ledger is not None else bc.WindowLedger(PARAMS), verify_key=public)
    return str(found.value)


# -- the rewrites (each by someone who holds the store, not the key) -----------------------------------
def header_epsilon_to_100(target: str) -> None:
    """ε rewritten to 100 in the stored header, the chain recomputed from the new H_0."""
    (text,) = sql(target, "SELECT value FROM meta WHERE key = 'header'")[0]
    drop_guards(target)
    forged = canonical({**json.loads(text), "epsilon": 100.0}).decode()
    sql(target, "UPDATE meta SET value = ? WHERE key = 'header'", params=(forged,))
    rechain(target)


def truncate_to_genesis(target: str) -> None:
    """Every record deleted and the head set back to H_0."""
    drop_guards(target)
    sql(target, "DELETE FROM records")
    rechain(target)


def roll_back_to_record_12(target: str) -> None:
    """The records after 12 deleted and the head set to record 12's (their budget can be spent again)."""
    drop_guards(target)
    sql(target, "DELETE FROM records WHERE seq > 12")
    rechain(target)


def refund_record_3(target: str) -> None:
    """Record 3's amount set to 0 (a refund) and every later hash recomputed."""
    drop_guards(target)
    sql(target, "UPDATE records SET amounts = ? WHERE seq = 3", params=(np.array([0.0]).tobytes(),))
    rechain(target)


def append_a_release(target: str) -> None:
    """A release row for the next timestamp appended, its hash continuing the chain (the insert
    trigger moves the head): what a restarted keyless publisher writes out."""
    db = open_store(target)
    try:
        ((count, head),) = db.execute("SELECT count, hash FROM head").fetchall()
        (latest,) = db.execute("SELECT COALESCE(MAX(t), 0) FROM records").fetchone()
        blob, seq = encode_array(np.array([666.0, 666.0])), count + 1
        digest = row_hash(bytes(head), 1, 1, seq, seq, latest + 1, b"", b"", blob)
        db.execute(
            f"INSERT INTO records ({ROW_COLUMNS}) VALUES (?, 1, 1, ?, ?, ?, '', ?, ?)",
            (seq, seq, latest + 1, b"", blob, digest),
        )
    finally:
        db.close()


def delete_checkpoint_3(target: str) -> None:
    sql(target, "DELETE FROM checkpoints WHERE number = 3")


def strip_every_checkpoint(target: str) -> None:
    sql(target, "DROP TABLE checkpoints")


def resign_the_last_checkpoint(target: str) -> None:
    """The last checkpoint's body (claiming our key) signed again by the forger's key."""
    forger = Ed25519PrivateKey.generate()
    ((number, body),) = sql(target, "SELECT number, body FROM checkpoints ORDER BY number DESC LIMIT 1")
    signature = forger.sign(DOMAIN + body.encode())
    sql(target, "UPDATE checkpoints SET signature = ? WHERE number = ?", params=(signature, number))


def refile_checkpoint_2_under_another_key(target: str) -> None:
    """Checkpoint 2 replaced by the forger's own checkpoint (its key, its signature)."""
    forger = Ed25519PrivateKey.generate()
    ((mine, body),) = sql(target, "SELECT key, body FROM checkpoints WHERE number = 2")
    theirs = fingerprint(forger.public_key())
    signature = forger.sign(DOMAIN + body.encode())
    sql(
        target,
        "UPDATE checkpoints SET key = ?, signature = ? WHERE number = 2 AND key = ?",
        params=(theirs, signature, mine),
    )


def garble_checkpoint_2(target: str) -> None:
    """A checkpoint row whose body is not JSON (a damaged or careless edit): found, never a crash."""
    sql(target, "UPDATE checkpoints SET body = 'not json' WHERE number = 2")


REWRITES: dict[str, tuple[Callable[[str], None], str]] = {
    "header epsilon to 100": (header_epsilon_to_100, "is not the stored header"),
    "truncation to genesis": (truncate_to_genesis, "records were removed"),
    "rollback to an earlier head": (roll_back_to_record_12, "signs 15 records, but the store holds 12"),
    "an old record refunded, chain recomputed": (refund_record_3, "record 5 is not the signed one"),
    "a forged appended release": (append_a_release, "appended without it"),
    "a checkpoint row deleted": (delete_checkpoint_3, "checkpoint 3 of key"),
    "every checkpoint row deleted": (strip_every_checkpoint, "holds no checkpoint signed by key"),
    "a checkpoint re-signed by another key": (resign_the_last_checkpoint, "the signature is not this key's"),
    "a checkpoint replaced by another key's": (refile_checkpoint_2_under_another_key, "checkpoint 2 of key"),
    "a checkpoint row garbled": (garble_checkpoint_2, "malformed row"),
}


@pytest.mark.parametrize("name", REWRITES)
def test_every_rewrite_is_found_with_the_key_and_passes_without(store: str, keys: tuple[Path, Path], name: str) -> None:
    """The rewrite campaign: the keyless audit passes every rewrite (a recomputed chain is a valid chain;
    checkpoints are not its business), audit --key exits 4 and open_ledger(verify_key=...) raises."""
    private, public = keys
    signed_ledger(store, private)
    rewrite, finding = REWRITES[name]
    rewrite(store)
    report = bc.audit_file(store)
    assert report.ok, report.problem
    assert cli_audit(store)[0] == 0
    opener = bc.WindowLedger(epsilon=100.0, w=4) if rewrite is header_epsilon_to_100 else bc.WindowLedger(PARAMS)
    assert finding in detected(store, public, opener)


def test_what_the_rewrites_buy_without_a_key(store: str, keys: tuple[Path, Path]) -> None:
    """Why they matter: after the header rewrite a ledger of ε = 100 opens the store; after the rollback
    the spends of t = 13..23 are gone and their budget is spent again."""
    private, _ = keys
    signed_ledger(store, private)
    roll_back_to_record_12(store)
    again = bc.open_ledger(store, bc.WindowLedger(PARAMS))
    assert again.t == 12
    again.spend(13, float(again.remaining(13)[0]), purpose="spent again")  # 0.4, not 0.0
    again.close()
    header_epsilon_to_100(store)
    bc.open_ledger(store, bc.WindowLedger(epsilon=100.0, w=4)).close()


def test_an_unsigned_record_edit_before_the_last_checkpoint_is_found_at_reopen(
    store: str, keys: tuple[Path, Path]
) -> None:
    """Reopening re-hashes only from the first row the windows count: a row there edited without
    recomputing anything, and an old row rewritten with the chain recomputed, are both still found."""
    private, public = keys
    signed_ledger(store, private)
    drop_guards(store)
    sql(store, "UPDATE records SET amounts = ? WHERE seq = 17", params=(np.array([0.0]).tobytes(),))
    with pytest.raises(bc.LedgerCorrupt, match="record 17"):
        bc.open_ledger(store, bc.WindowLedger(PARAMS), verify_key=public)


def test_forged_appended_release_is_not_written_out_by_a_signing_publisher(
    store: str, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """After a signing publisher's stop, a release row appended by the forger (hash and head recomputed
    by the insert trigger) for the next timestamp. A keyless restart writes it into --out; a signing
    restart refuses the store (exit 4) and writes nothing."""
    private, public = keys
    source = tmp_path / "in.csv"
    source.write_text("".join(f"{t},{100 + t},{t % 5}\n" for t in range(1, 9)))
    out = tmp_path / "out.csv"

    def publish(*extra: str) -> tuple[int, str]:
        args = ["publish", "BD", "--ledger", store, "--epsilon", "1", "--w", "5", "-d", "2", "--input", str(source)]
        result = CliRunner().invoke(main, [*args, "--out", str(out), "--durability", "process", *extra])
        return result.exit_code, result.output

    source.write_text("".join(f"{t},{100 + t},{t % 5}\n" for t in range(1, 5)))
    code, output = publish("--signing-key", str(private))
    assert code == 0, output
    assert out.read_text().count("\n") == 4
    report = bc.verify_checkpoints(store, public)
    assert report.stopped and report.unsigned == 0
    append_a_release(store)  # t = 5
    assert bc.audit_file(store).ok  # keyless: a well-formed release continuing the chain
    code, output = cli_audit(store, "--key", str(public))
    assert code == 4 and "appended without it" in output, output
    source.write_text("".join(f"{t},{100 + t},{t % 5}\n" for t in range(1, 9)))
    code, output = publish("--signing-key", str(private))
    assert code == 4, output
    assert out.read_text().count("\n") == 4 and "666" not in out.read_text()
    publish()  # what a keyless restart does (it then stops, exit 4, when its own t = 5 differs)
    assert "5,666,666" in out.read_text()


# -- what is and is not a store's checkpoint state ---------------------------------------------------
def test_a_signing_publisher_leaves_every_release_signed_and_its_stop(store: str, keys: tuple[Path, Path]) -> None:
    private, public = keys
    lines = [f"{t},{100 + t},{t % 5}\n" for t in range(1, 13)]
    summary = bc.publish(
        bc.load_mechanism("BD"),
        lines,
        store,
        dimensions=2,
        epsilon=1.0,
        w=5,
        out=io.StringIO(),
        signing_key=private,
        checkpoint_every=1000,
    )
    assert summary.published == 12
    report = bc.verify_checkpoints(store, public)
    assert report.stopped and report.unsigned == 0 and report.signed_head == summary.head
    assert report.checkpoints >= 12 + 1  # the genesis, every release, the stop
    code, output = cli_audit(store, "--key", str(public))
    assert code == 0 and "checkpoints: ok" in output, output


def test_an_unsigned_store_is_refused_with_a_key_until_signed(store: str, keys: tuple[Path, Path]) -> None:
    """A store with no checkpoint of the key cannot be told from a stripped one: refused by the verifier
    and by a signer; ``budgetcheck sign`` (after a full audit) brings it under the key."""
    private, public = keys
    ledger = bc.open_ledger(store, bc.WindowLedger(PARAMS))
    ledger.spend(1, 0.5, purpose="before signing")
    ledger.close()
    for key in ({"verify_key": public}, {"signing_key": private}):
        with pytest.raises(bc.LedgerCorrupt, match="no checkpoint signed by key"):
            bc.open_ledger(store, bc.WindowLedger(PARAMS), **key)  # type: ignore[arg-type]
    result = CliRunner().invoke(main, ["sign", store, "--signing-key", str(private)])
    assert result.exit_code == 0, result.output
    again = bc.open_ledger(store, bc.WindowLedger(PARAMS), verify_key=public)
    assert float(again.remaining(1)[0]) == pytest.approx(0.5)
    again.close()


def test_sign_refuses_a_store_whose_audit_fails(store: str, keys: tuple[Path, Path]) -> None:
    """Signing vouches for a history: a record edited without its hash recomputed is never signed."""
    private, public = keys
    ledger = bc.open_ledger(store, bc.WindowLedger(PARAMS))
    ledger.spend(1, 0.5, purpose="a")
    ledger.spend(2, 0.2, purpose="b")
    ledger.close()
    drop_guards(store)
    sql(store, "UPDATE records SET amounts = ? WHERE seq = 1", params=(np.array([0.1]).tobytes(),))
    result = CliRunner().invoke(main, ["sign", store, "--signing-key", str(private)])
    assert result.exit_code == 4 and "not signed" in result.output, result.output
    with pytest.raises(bc.LedgerCorrupt, match="no checkpoint signed by key"):
        bc.verify_checkpoints(store, public)


def test_rotation_signs_under_the_new_key_after_the_old_one_verifies(
    store: str, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    private, public = keys
    signed_ledger(store, private)
    bc.generate_keys(tmp_path / "new.key", tmp_path / "new.pub")
    result = CliRunner().invoke(
        main, ["sign", store, "--signing-key", str(tmp_path / "new.key"), "--previous-key", str(public)]
    )
    assert result.exit_code == 0, result.output
    assert bc.verify_checkpoints(store, tmp_path / "new.pub").signed_count == SPENDS
    sql(store, "DELETE FROM checkpoints WHERE number = 2")  # the old key's history is now broken
    result = CliRunner().invoke(
        main, ["sign", store, "--signing-key", str(tmp_path / "new.key"), "--previous-key", str(public)]
    )
    assert result.exit_code == 4, result.output


def test_reopen_with_a_key_counts_exactly_what_the_whole_chain_counts(store: str, keys: tuple[Path, Path]) -> None:
    private, public = keys
    signed_ledger(store, private, spends=40)
    plain = bc.open_ledger(store, bc.WindowLedger(PARAMS))
    signed = bc.open_ledger(store, bc.WindowLedger(PARAMS), verify_key=public)
    for t in range(40, 46):
        assert np.array_equal(plain.remaining(t), signed.remaining(t))
    with pytest.raises(bc.BudgetExceeded):
        signed.spend(40, 0.3, purpose="over")  # 0.8 + 0.3 > 1 in [37, 40]
    signed.spend(41, float(signed.remaining(41)[0]), purpose="exactly what is left")
    plain.close()
    signed.close()


def test_the_undetectable_rollback_to_an_earlier_signed_state(store: str, keys: tuple[Path, Path]) -> None:
    """Documented limit (docs/explanation/tamper-evidence.md): the records after checkpoint 3 and the
    checkpoints after it deleted is exactly the store as it was when checkpoint 3 was signed, which the
    key vouched for; only a head kept elsewhere (--expect-head) finds it."""
    private, public = keys
    signed_ledger(store, private)
    ((kept,),) = sql(store, "SELECT hash FROM records WHERE seq = ?", params=(SPENDS,))
    drop_guards(store)
    sql(store, "DELETE FROM records WHERE seq > 10", "DELETE FROM checkpoints WHERE number > 3")
    rechain(store)
    assert bc.verify_checkpoints(store, public).signed_count == 10
    assert cli_audit(store, "--key", str(public))[0] == 0
    code, output = cli_audit(store, "--key", str(public), "--expect-head", bytes(kept).hex())
    assert code == 4 and "does not extend the expected head" in output, output


def test_a_signer_signs_every_n_records_and_its_close(store: str, keys: tuple[Path, Path]) -> None:
    private, public = keys
    ledger = bc.open_ledger(store, bc.WindowLedger(PARAMS), signing_key=private, checkpoint_every=EVERY)
    for t in range(1, SPENDS + 1):
        ledger.spend(t, 0.2, purpose="s")
    mid = bc.verify_checkpoints(store, public)
    assert (mid.checkpoints, mid.signed_count, mid.unsigned) == (5, 20, 3)
    ledger.close()
    done = bc.verify_checkpoints(store, public)
    assert (done.checkpoints, done.signed_count, done.unsigned) == (6, SPENDS, 0)


# -- keys ----------------------------------------------------------------------------------------------
def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["keygen", str(tmp_path / "k.pem")])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((tmp_path / "k.pem").stat().st_mode) == 0o600
    assert (tmp_path / "k.pem.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    again = CliRunner().invoke(main, ["keygen", str(tmp_path / "k.pem")])
    assert again.exit_code == 2 and "never overwritten" in again.output, again.output


def test_bad_keys_are_refused_naming_the_argument(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    target = tmp_path / "bad.db"
    with pytest.raises(bc.InvalidArgument, match="verify_key=.*holds a private key"):
        bc.open_ledger(target, bc.WindowLedger(PARAMS), verify_key=private)
    private.chmod(0o644)
    with pytest.raises(bc.InvalidArgument, match="signing_key=.*can be read by other users"):
        bc.open_ledger(target, bc.WindowLedger(PARAMS), signing_key=private)
    private.chmod(0o600)
    with pytest.raises(bc.InvalidArgument, match="checkpoint_every=0"):
        bc.open_ledger(target, bc.WindowLedger(PARAMS), signing_key=private, checkpoint_every=0)
    with pytest.raises(bc.InvalidArgument, match="verify_key=.*not an existing key file"):
        bc.open_ledger(target, bc.WindowLedger(PARAMS), verify_key=tmp_path / "missing.pub")
    assert not target.exists()  # refused before the store was made
    code, output = cli_audit(str(tmp_path), "--key", str(public))
    assert code == 2
