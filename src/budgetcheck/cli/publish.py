"""The ``budgetcheck publish`` command and the ledger-file branch of ``budgetcheck audit`` (thin: the
work is in :mod:`budgetcheck.durable.publish` and :mod:`budgetcheck.durable.audit_file`)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from budgetcheck.cli.types import FilePath, LedgerTarget, OutputPath
from budgetcheck.durable.audit_file import audit_file
from budgetcheck.durable.checkpoint import DEFAULT_EVERY, CheckpointReport, verify_checkpoints
from budgetcheck.durable.journal import DURABILITY, LOCK_TIMEOUT
from budgetcheck.ledger.errors import (
    BudgetcheckError,
    BudgetExceeded,
    InvalidArgument,
    LedgerBusy,
    LedgerCorrupt,
    LedgerUnavailable,
)
from budgetcheck.ledger.noise import DISCRETE, SAMPLERS
from budgetcheck.ledger.notion import Notion

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_CORRUPT, EXIT_BUSY = 0, 1, 2, 4, 5


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number of seconds")
    return value


@click.command()
@click.argument("mechanism")
@click.option(
    "--ledger",
    "ledger_path",
    required=True,
    type=LedgerTarget(dir_okay=False, path_type=Path),
    help="The ledger file, or a shared ledger's postgresql://user@host:port/db[?ledger=name] URL (created if "
    "missing; a restart resumes from it).",
)
@click.option("--epsilon", type=float, default=None, help="The budget ε (w-event and Swellfish mechanisms).")
@click.option("--w", type=int, default=None, help="The window length w (w-event mechanisms).")
@click.option(
    "--requirements",
    "requirements_path",
    default=None,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="Personalized mechanisms: a file of user,w,epsilon lines (each user's w_i and ε_i).",
)
@click.option(
    "--policies",
    "policies_path",
    default=None,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="Swellfish mechanisms: a file of start,end,theta_1[,theta_2,...] lines (each policy's relevance interval "
    "and pattern thresholds); timestamps no policy covers are released exactly.",
)
@click.option(
    "-d",
    "--dimensions",
    type=int,
    default=1,
    show_default=True,
    help="Counts per row (w-event) or bins (personalized).",
)
@click.option(
    "--input",
    "input_path",
    default="-",
    type=FilePath(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="w-event: rows t,c_1..c_d (CSV) or JSON lines {'t':..,'counts':[..]}. Personalized: rows t,user,bin "
    "or {'t':..,'user':..,'bin':..} (a row with only t closes t). '-' is stdin.",
)
@click.option(
    "--out",
    "out_path",
    default=None,
    type=OutputPath(),
    help="Append releases to this file (exactly once across restarts); default stdout.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl"]),
    default="csv",
    show_default=True,
    help='Input rows: csv (t,c_1,..,c_d) or jsonl ({"t": t, "counts": [..]}); also the output\'s unless '
    "--output-format is given.",
)
@click.option(
    "--output-format",
    "output_format",
    type=click.Choice(["csv", "jsonl"]),
    default=None,
    help='Releases: csv (t,r_1,..,r_d) or jsonl ({"t": t, "counts": [..]}, the input\'s key). Default: --format.',
)
@click.option("--json", "as_json", is_flag=True, help="Print the closing summary on stderr as JSON.")
@click.option(
    "--sampler",
    type=click.Choice(list(SAMPLERS)),
    default=DISCRETE,
    show_default=True,
    help="discrete-laplace: exact, from the OS CSPRNG (integer counts). numpy-laplace is refused: its "
    "seeded noise could be subtracted from the releases.",
)
@click.option(
    "--durability",
    type=click.Choice(sorted(DURABILITY)),
    default="full",
    show_default=True,
    help="full: every commit waits for the disk (SQLite synchronous=FULL, PostgreSQL synchronous_commit=on). "
    "process: spends are committed without waiting for it (synchronous=NORMAL / synchronous_commit=off), "
    "faster when a timestamp charges several times; each release's commit still waits for the disk, and covers "
    "the spends before it. In both modes a release is written out only once it is on the disk, so every written "
    "release survives a killed publisher, a crash of the PostgreSQL server and a power loss of the host (a disk "
    "that honours fsync; PostgreSQL with fsync=on); no timestamp is ever released twice. What process mode can "
    "lose to a server crash or power loss is the spends of a timestamp not yet released (its noise never left "
    "the publisher): the restart redoes that timestamp.",
)
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0, min_open=True, max=1e9),
    default=LOCK_TIMEOUT,
    show_default=True,
    callback=lambda _ctx, _param, value: _finite(value),
    help="Seconds to wait for another writer of the ledger before giving up with exit 5 (nothing charged).",
)
@click.option(
    "--skip-bad-rows", is_flag=True, help="Report malformed rows on stderr and go on (default: stop at the first)."
)
@click.option(
    "--signing-key",
    default=None,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="Ed25519 private key (PEM, from budgetcheck keygen; kept outside the ledger): verify the ledger's "
    "checkpoints of this key at start, then sign every release, every --checkpoint-every records and the stop.",
)
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=1),
    default=DEFAULT_EVERY,
    show_default=True,
    help="Records between signed checkpoints (with --signing-key).",
)
@click.option(
    "--trusted-code",
    is_flag=True,
    help="Allow the mechanism's own code to read true values in this process (isolation='trusted'); "
    "refused by default, before any charge.",
)
@click.option(
    "--allow-vouched",
    is_flag=True,
    help="Allow charges at a sensitivity the mechanism vouches for (ledger.measure); refused by default.",
)
def publish(
    mechanism: str,
    ledger_path: Path | str,
    epsilon: float | None,
    w: int | None,
    requirements_path: Path | None,
    policies_path: Path | None,
    dimensions: int,
    input_path: Path,
    out_path: Path | None,
    fmt: str,
    output_format: str | None,
    as_json: bool,
    sampler: str,
    durability: str,
    lock_timeout: float,
    skip_bad_rows: bool,
    signing_key: Path | None,
    checkpoint_every: int,
    trusted_code: bool,
    allow_vouched: bool,
) -> None:
    """Publish a live stream through MECHANISM on a durable ledger, one timestamp at a time.

    Exit codes: 0 done; 1 a spend refused (nothing released for that timestamp); 2 usage or input
    error; 4 the ledger file is damaged or altered; 5 the ledger stayed locked by another writer for
    --lock-timeout seconds (nothing charged; earlier releases kept; rerun to resume).
    """
    from budgetcheck.durable.publish import publish as run
    from budgetcheck.ledger.policies import load_policies
    from budgetcheck.mechanism.loading import load_mechanism
    from budgetcheck.stream.events import load_requirements, read_text_lines

    try:
        mech = load_mechanism(mechanism)
        requirements = None
        if requirements_path is not None:
            requirements = load_requirements(
                read_text_lines(requirements_path, source=str(requirements_path)), source=str(requirements_path)
            )
        policies = None
        if policies_path is not None:
            policies = load_policies(
                read_text_lines(policies_path, source=str(policies_path)), source=str(policies_path)
            )
        stdout = sys.stdout
        with click.open_file(str(input_path), "rb") as lines:  # bytes: a line that is not UTF-8 is a bad row
            summary = run(
                mech,
                lines,
                ledger_path,
                epsilon=epsilon,
                w=w,
                requirements=requirements,
                policies=policies,
                dimensions=dimensions,
                out=None if out_path else stdout,
                out_path=out_path,
                fmt=fmt,
                output_format=output_format,
                sampler=sampler,
                durability=durability,
                lock_timeout=lock_timeout,
                skip_bad_rows=skip_bad_rows,
                on_reject=lambda message: click.echo(f"rejected {message}", err=True),
                signing_key=signing_key,
                checkpoint_every=checkpoint_every,
                trusted_code=trusted_code,
                allow_vouched=allow_vouched,
            )
    except LedgerCorrupt as exc:
        click.echo(f"Error: {_shown(ledger_path)}: {exc}", err=True)
        sys.exit(EXIT_CORRUPT)
    except (LedgerBusy, LedgerUnavailable) as exc:
        click.echo(
            f"Error: {_shown(ledger_path)}: {exc} (nothing was charged or released for it; rerun to resume)", err=True
        )
        sys.exit(EXIT_BUSY)
    except BudgetExceeded as exc:
        click.echo(f"Error: refused, nothing released for this timestamp: {exc}", err=True)
        sys.exit(EXIT_VIOLATION)
    except (InvalidArgument, BudgetcheckError) as exc:
        click.echo(f"Error: {exc} (nothing was released for it; earlier releases are kept)", err=True)
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "version": 1,
                    "published": summary.published,
                    "replayed": summary.replayed,
                    "rewritten": summary.rewritten,
                    "rejected": list(summary.rejected),
                    "head": summary.head,
                }
            ),
            err=True,
        )
        return
    click.echo(
        f"published {summary.published} timestamps (replayed {summary.replayed}, rewrote {summary.rewritten}, "
        f"rejected {len(summary.rejected)}); ledger head {summary.head}",
        err=True,
    )


def _shown(target: Path | str) -> str:
    """A ledger path, or its URL without the password."""
    from budgetcheck.durable.journal import is_url

    if is_url(target):
        from budgetcheck.durable.postgres import redact

        return redact(str(target))
    return str(target)


def audit_ledger_file(
    path: Path | str,
    expect_head: str | None,
    as_json: bool,
    epsilon: float | None = None,
    w: int | None = None,
    key: Path | None = None,
) -> None:
    """``budgetcheck audit`` on a ledger file: chain, head and composition (against the file's header,
    or a w-event file's windows against the given ε and w) and, with ``key``, every checkpoint signed by
    it (a problem with them exits 4 like a broken chain); exits."""
    signed: CheckpointReport | str | None = None
    try:
        if key is not None:
            try:
                signed = verify_checkpoints(path, key)
            except LedgerCorrupt as exc:
                signed = str(exc)
        report = audit_file(path, expect_head=expect_head, epsilon=epsilon, w=w)
    except LedgerCorrupt as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_CORRUPT)
    except LedgerUnavailable as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_BUSY)
    except InvalidArgument as exc:
        click.echo(f"Error: {_shown(path)}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "version": 1,
                    "notion": report.notion,
                    "ok": report.ok and not isinstance(signed, str),
                    "records": report.records,
                    "head": report.head,
                    "chain_problem": report.problem,
                    "constraints_checked": report.checked,
                    "worst_over_budget": float(report.worst_ratio),
                    "violations": list(report.violations),
                    "violating_windows": report.violating_windows,
                    **({"epsilon": report.epsilon, "w": report.w} if report.notion == Notion.W_EVENT else {}),
                    **({} if signed is None else {"checkpoints": _checkpoints_json(signed)}),
                },
                indent=2,
            )
        )
    else:
        checked = (
            f" (windows checked against epsilon={report.epsilon!r}, w={report.w})"
            if report.notion == Notion.W_EVENT
            else ""
        )
        click.echo(f"{report.path}: {report.notion} ledger file, {report.records} records, head {report.head}{checked}")
        click.echo(f"chain: {'ok' if report.problem is None else 'BROKEN: ' + report.problem}")
        if signed is not None:
            click.echo(f"checkpoints: {_checkpoints_line(signed)}")
        click.echo(f"{report.checked} constraints checked; worst: {float(report.worst_ratio):.6f} of the budget")
        for violation in report.violations:
            click.echo(f"VIOLATION {violation}")
        unlisted = report.violating_windows - len(report.violations)
        if unlisted > 0:
            click.echo(f"... and {unlisted} more windows over epsilon (the first {len(report.violations)} are listed)")
        click.echo("ok" if report.ok and not isinstance(signed, str) else "FAIL")
    if isinstance(signed, str):
        sys.exit(EXIT_CORRUPT)
    sys.exit(EXIT_OK if report.ok else (EXIT_CORRUPT if report.problem else EXIT_VIOLATION))


def _checkpoints_json(signed: CheckpointReport | str) -> dict[str, object]:
    if isinstance(signed, str):
        return {"ok": False, "problem": signed}
    return {
        "ok": True,
        "key": signed.key,
        "checkpoints": signed.checkpoints,
        "signed_records": signed.signed_count,
        "signed_head": signed.signed_head,
        "unsigned_records": signed.unsigned,
        "stopped": signed.stopped,
    }


def _checkpoints_line(signed: CheckpointReport | str) -> str:
    if isinstance(signed, str):
        return f"BROKEN: {signed}"
    stop = ", a publisher's stop" if signed.stopped else ""
    return (
        f"ok ({signed.checkpoints} signed by key {signed.key}; the last covers {signed.signed_count} records{stop}; "
        f"{signed.unsigned} records after it are not signed)"
    )
