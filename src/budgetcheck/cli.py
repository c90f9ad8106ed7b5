"""The `budgetcheck` command line: a thin layer over the library.

Exit codes (stable, for CI): 0 = every check passed; 1 = a violation was found; 2 = usage or
input error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from budgetcheck._audit import audit_windows
from budgetcheck._errors import InvalidArgument
from budgetcheck._records import load_lines
from budgetcheck._verify import VerifyResult, verify_mechanism

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2


class InputError(click.ClickException):
    """A bad input file or value: exit code 2, like a usage error."""

    exit_code = EXIT_USAGE


@click.group()
@click.version_option(package_name="budgetcheck")
def main() -> None:
    """Provably right privacy accounting for differentially private streams."""


@main.command()
@click.argument("mechanism", nargs=-1)
@click.option("--all", "verify_all", is_flag=True, help="Verify every built-in mechanism.")
@click.option("--examples", default=100, show_default=True, type=click.IntRange(1), help="Generated cases per mechanism.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Hypothesis seed (reproducible runs).")
@click.option("--max-length", default=60, show_default=True, type=click.IntRange(1), help="Longest generated stream.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of the table.")
def verify(mechanism: tuple[str, ...], verify_all: bool, examples: int, seed: int, max_length: int, as_json: bool) -> None:
    """Check that MECHANISM (a built-in name such as BD, or module:attr) never overspends.

    Runs it on generated streams and privacy parameters, re-checks every window of every run from
    the ledger's records with an independent brute-force checker, and shrinks any failure.
    """
    references = list(mechanism)
    if verify_all:
        from mechanisms import BUILTIN

        references += [name for name in BUILTIN if name not in references]
    if not references:
        raise click.UsageError("name a MECHANISM (e.g. BD or my_module:MyMechanism) or pass --all")
    results = []
    for reference in references:
        try:
            results.append(verify_mechanism(reference, examples=examples, seed=seed, max_length=max_length))
        except InvalidArgument as exc:
            raise click.BadParameter(str(exc), param_hint="MECHANISM") from exc
    if as_json:
        click.echo(json.dumps({"version": 1, "results": [r.to_json() for r in results]}, indent=2))
    else:
        _print_table(results)
    sys.exit(EXIT_OK if all(r.passed for r in results) else EXIT_VIOLATION)


def _print_table(results: list[VerifyResult]) -> None:
    header = f"{'mechanism':<14} {'examples':>8} {'runs':>6} {'worst window / ε':>17}  verdict"
    click.echo(header)
    click.echo("-" * len(header))
    for r in results:
        verdict = "pass" if r.passed else "FAIL"
        click.echo(f"{r.mechanism:<14} {r.examples:>8} {r.runs:>6} {r.worst_ratio:>17.6f}  {verdict}")
    for r in results:
        if r.counterexample is not None:
            ce = r.counterexample
            click.echo(f"\n{r.mechanism}: {ce.reason}: {ce.detail}")
            click.echo(f"  shrunk case: kind={ce.case.kind} T={ce.case.data.shape[0]} d={ce.case.data.shape[1]} "
                       f"epsilon={ce.case.epsilon!r} w={ce.case.w} runs={ce.case.runs} seed={ce.case.seed}")
            click.echo(f"  reproduce: {ce.call(r.reference)}")


@main.command()
@click.argument("log", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--epsilon", type=float, default=None, help="The ε to check against (default: the log's header).")
@click.option("--w", type=int, default=None, help="The window length w (default: the log's header).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def audit(log: Path, epsilon: float | None, w: int | None, as_json: bool) -> None:
    """Re-check an exported ledger LOG (JSON lines) offline: every window of every run <= ε."""
    try:
        with log.open(encoding="utf-8") as handle:
            header, records = load_lines(handle)
        report = audit_windows(
            records,
            epsilon=header.epsilon if epsilon is None else epsilon,
            w=header.w if w is None else w,
            runs=header.runs,
        )
    except InvalidArgument as exc:
        raise InputError(f"{log}: {exc}") from exc
    if as_json:
        click.echo(json.dumps({
            "version": 1,
            "ok": report.ok,
            "epsilon": report.epsilon,
            "w": report.w,
            "runs": report.runs,
            "records": report.records,
            "windows_checked": report.windows_checked,
            "worst_window_over_epsilon": float(report.worst_ratio),
            "violations": [v.describe(report.epsilon) for v in report.violations],
        }, indent=2))
    else:
        click.echo(f"{log}: {report.records} records, {report.runs} runs, {report.windows_checked} windows checked "
                   f"against epsilon={report.epsilon!r}, w={report.w}")
        if report.worst is not None:
            click.echo(f"worst: {report.worst.describe(report.epsilon)}")
        for violation in report.violations:
            click.echo(f"VIOLATION {violation.describe(report.epsilon)}")
        click.echo("ok" if report.ok else "FAIL")
    sys.exit(EXIT_OK if report.ok else EXIT_VIOLATION)


@main.command(name="mechanisms")
def list_mechanisms() -> None:
    """List the built-in mechanisms."""
    from mechanisms import BUILTIN

    for name, factory in BUILTIN.items():
        doc = (factory.__doc__ or "").strip().splitlines()
        click.echo(f"{name:<10} {doc[0] if doc else ''}")
