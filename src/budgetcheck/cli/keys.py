"""``budgetcheck keygen`` and ``budgetcheck sign``: the key pair of signed checkpoints, and signing a
ledger's current head after a full audit (thin: the work is in :mod:`budgetcheck.durable.checkpoint`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from budgetcheck.cli.types import FilePath, LedgerTarget
from budgetcheck.durable.checkpoint import generate_keys, sign_ledger
from budgetcheck.ledger.errors import InvalidArgument, LedgerBusy, LedgerCorrupt, LedgerUnavailable

EXIT_USAGE, EXIT_CORRUPT, EXIT_BUSY = 2, 4, 5


@click.command()
@click.argument("private_key", type=FilePath(dir_okay=False, path_type=Path))
@click.option(
    "--public",
    "public_key",
    default=None,
    type=FilePath(dir_okay=False, path_type=Path),
    help="Where to write the public key (default: PRIVATE_KEY with .pub appended).",
)
def keygen(private_key: Path, public_key: Path | None) -> None:
    """Write a new Ed25519 key pair for signed checkpoints: PRIVATE_KEY (PEM, mode 0600, for the publisher
    only; keep it outside the ledger's host or database) and its public key (PEM, for every auditor).
    Existing files are never overwritten. See docs/explanation/tamper-evidence.md (rotation)."""
    public = public_key if public_key is not None else private_key.with_name(private_key.name + ".pub")
    try:
        key = generate_keys(private_key, public)
    except (InvalidArgument, OSError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(f"wrote {private_key} (private, 0600) and {public} (public); key {key}")


@click.command()
@click.argument("ledger", type=LedgerTarget(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--signing-key",
    required=True,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="The Ed25519 private key (PEM) to sign with.",
)
@click.option(
    "--previous-key",
    default=None,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="Rotation: the public key being retired; its checkpoints must verify before the new key signs.",
)
def sign(ledger: Path | str, signing_key: Path, previous_key: Path | None) -> None:
    """Sign the current head of LEDGER (a file or a postgresql:// URL) after auditing its whole chain and
    composition: how a ledger kept before signing, or under a retired key, comes under SIGNING_KEY.
    Signing vouches for the history as it is now. Exit 4 if the ledger or the old key's checkpoints fail."""
    try:
        report = sign_ledger(ledger, signing_key, previous_key=previous_key)
    except LedgerCorrupt as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_CORRUPT)
    except (LedgerBusy, LedgerUnavailable) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_BUSY)
    except InvalidArgument as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(
        f"signed {report.signed_count} records (head {report.signed_head}) as checkpoint {report.checkpoints} of key "
        f"{report.key}"
    )
