"""The `budgetcheck` command line: a thin layer over the library.

Exit codes (stable, for CI): 0 = every check passed; 1 = a violation was found; 2 = usage or
input error (including the user's module failing to import); 3 = inconclusive (a stage could not
decide); 4 = a ledger file is damaged or altered; 5 = a ledger stayed locked by another writer;
70 = an internal error of budgetcheck (a bug: please report it); 130 = interrupted (Ctrl-C), as a
shell reports for a tool stopped by SIGINT; 141 = the reader of the output stopped (``| head``), as
for a tool stopped by SIGPIPE.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click

from budgetcheck.cli.types import FilePath, LedgerTarget, OutputPath, Progress
from budgetcheck.ledger.audit import audit_windows
from budgetcheck.ledger.errors import InvalidArgument, MechanismContractError
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, load_lines
from budgetcheck.mechanism.loading import load_mechanism
from budgetcheck.verify.profiles import PROFILES, STAGES
from budgetcheck.verify.verdict import REQUIREMENTS, Outcome, Verdict, exit_code

if TYPE_CHECKING:  # the stages need the verify extra: verify loads them once it has checked it is installed
    from budgetcheck.verify.stages import VerifyResult

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_PIPE = 128 + 13  # what a shell reports for a tool stopped by SIGPIPE: never 0, the output was cut short
EXIT_INTERRUPTED = 128 + 2  # what a shell reports for a tool stopped by SIGINT: never 1, "a violation was found"


class _Commands(click.Group):
    """The command group; an error inside budgetcheck itself (a bug, not the user's input) exits 70
    (EX_SOFTWARE) with its traceback, never 1, which means "a violation was found"."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1, which CI reads as a violation
            click.echo("\nAborted: interrupted (exit 130); what was stored is kept.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # the reader went away (`budgetcheck mechanisms | head`): stop as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at shutdown
            sys.exit(EXIT_PIPE)
        except Exception:
            click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo(
                "Error: an internal error of budgetcheck (exit 70); please report it with the traceback above.",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)


class InputError(click.ClickException):
    """A bad input file or value: exit code 2, like a usage error."""

    exit_code = EXIT_USAGE


def _require(extra: str) -> None:
    """Stop with one line naming the extra to install (exit 2) if ``extra`` is not (:mod:`budgetcheck.extras`)."""
    from budgetcheck.extras import require_extra
    from budgetcheck.ledger.errors import MissingExtra

    ctx, names = click.get_current_context(), []
    while ctx.parent is not None:  # the command's words under `budgetcheck`: "bench personalized"
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    try:
        require_extra(extra, " ".join(["budgetcheck", *reversed(names)]))
    except MissingExtra as missing:
        raise InputError(str(missing)) from None


@click.group(cls=_Commands)
@click.version_option(package_name="budgetcheck")
def main() -> None:
    """Provably right privacy accounting for differentially private streams.

    Exit codes: 0 ok; 1 a violation found; 2 usage or input error; 3 inconclusive; 4 a ledger file
    damaged or altered; 5 a ledger locked by another writer too long; 70 an internal error (a bug);
    130 interrupted (Ctrl-C).
    """


@main.command()
@click.argument("mechanism", nargs=-1)
@click.option("--all", "verify_all", is_flag=True, help="Verify every built-in mechanism.")
@click.option(
    "--profile",
    type=click.Choice(sorted(PROFILES)),
    default="quick",
    show_default=True,
    help="quick: 60 cases, exploration to w = 64 (T = 4w), proofs for w <= 12, 4,000 audit runs; "
    "thorough: 1,000, w = 128, 128, 40,000.",
)
@click.option(
    "--examples", default=None, type=click.IntRange(1), help="Generated cases per mechanism (overrides the profile)."
)
@click.option(
    "--stages",
    default=STAGES,
    show_default=True,
    help="Stages to run: a replay, b secret access, c proof, d statistical audit, e exploration and rule conformance.",
)
@click.option(
    "--require",
    type=click.Choice(REQUIREMENTS),
    default="bounded",
    show_default=True,
    help="What exits 0: bounded (proved, or verified to the bound printed) or proof (proved only).",
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed (reproducible runs).")
@click.option("--max-length", default=60, show_default=True, type=click.IntRange(1), help="Longest generated stream.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of the table.")
@click.option(
    "--timings", is_flag=True, help="With --json: each stage's seconds (the report is then not reproducible)."
)
@click.option("--junit-xml", type=OutputPath(), default=None, help="Also write a JUnit XML report.")
@click.option(
    "--report",
    type=OutputPath(),
    default=None,
    help="Plot the window sums of the worst run found against ε (PNG, or HTML for .html); one mechanism only.",
)
@click.option(
    "-j",
    "--jobs",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Mechanisms verified at once, one process each; the results and their order do not depend on it.",
)
@click.option(
    "--trusted-code",
    is_flag=True,
    help="Run the mechanism on ledgers that allow its own code on true values in this process "
    "(isolation='trusted'), as an owner who allows it would; such a mechanism is then inconclusive.",
)
@click.option(
    "--allow-vouched",
    is_flag=True,
    help="Run it on ledgers that allow a sensitivity it vouches for (ledger.measure); it is then never proved.",
)
def verify(
    mechanism: tuple[str, ...],
    verify_all: bool,
    profile: str,
    examples: int | None,
    stages: str,
    require: str,
    seed: int,
    max_length: int,
    as_json: bool,
    timings: bool,
    junit_xml: Path | None,
    report: Path | None,
    jobs: int,
    trusted_code: bool,
    allow_vouched: bool,
) -> None:
    """Check that MECHANISM (a built-in name such as BD, or module:attr) never overspends.

    Five stages, each reported: (a) ledger replay on generated streams with an independent
    brute-force recheck of every window; (b) secret access and non-interference; (e) exploration
    with charged outputs the verifier chooses, and conformance of the charges to the allocation
    rule; (c) Z3 proof of the allocation rule; (d) statistical lower bound on the privacy loss.
    Verdict per mechanism: proved (rule proved and conformance held), verified to a bound (nothing
    found up to the w and T printed), violated, or inconclusive.

    \b
    Exit codes: 0 every verdict meets --require (default bounded: proved or verified to a bound);
    1 a violation; 2 usage error; 3 inconclusive, or not meeting --require (e.g. --require proof
    on a mechanism without a rule).
    """
    _require("verify")
    from budgetcheck.verify.pool import verify_in_order

    _hypothesis_cache()
    references = list(mechanism)
    if verify_all:
        from mechanisms import BUILTIN

        references += [name for name in BUILTIN if name not in references]
    if not references:
        raise click.UsageError("name a MECHANISM (e.g. BD or my_module:MyMechanism) or pass --all")
    if not stages or set(stages) - set(STAGES):
        raise click.BadParameter(f"stages={stages!r} must be letters from {STAGES!r}", param_hint="--stages")
    results: list[VerifyResult] = []
    decided = verify_in_order(
        references,
        jobs=jobs,
        worker_setup=_hypothesis_cache,
        examples=examples,
        seed=seed,
        max_length=max_length,
        profile=profile,
        stages=stages,
        trusted_code=trusted_code,
        allow_vouched=allow_vouched,
    )
    try:
        for result in decided:
            if not as_json:
                if not results:  # the header with the first row: a name that does not load is a bare usage error
                    _print_header()
                _print_row(result)  # as soon as it and every earlier one are decided
            results.append(result)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="MECHANISM") from exc
    except MechanismContractError as exc:
        raise InputError(f"the mechanism breaks its contract with the harness: {exc}") from exc
    if as_json:
        click.echo(
            json.dumps(
                {
                    "version": 2,
                    "profile": profile,
                    "require": require,
                    "results": [r.to_json(timings=timings) for r in results],
                },
                indent=2,
            )
        )
    else:
        _print_details(results, require)
    if junit_xml is not None:
        junit_xml.write_text(_junit(results), encoding="utf-8")
    if report is not None:
        if len(results) != 1:
            raise click.BadParameter("--report plots one mechanism; name exactly one", param_hint="--report")
        case = results[0].counterexample.case if results[0].counterexample else results[0].worst_case
        if case is None:
            raise click.BadParameter("--report needs stage a (ledger replay) in --stages", param_hint="--report")
        from budgetcheck.verify.owner import allowing
        from budgetcheck.verify.report import write_report

        with allowing(trusted_code=trusted_code, allow_vouched=allow_vouched):
            write_report(results[0], case, report)
        click.echo(f"wrote the report of {results[0].mechanism} to {report.resolve()}", err=True)
    sys.exit(exit_code((r.outcome for r in results), require))


_COLUMNS = ("ledger replay", "secret access", "exploration", "rule conformance", "proof", "statistical audit")
_HEADER = (
    f"{'mechanism':<22} {'examples':>8} {'runs':>6} {'worst window / ε':>17}  {'replay':<7} {'secret':<7} "
    f"{'explore':<7} "
    f"{'conform':<10} {'proof':<10} {'audit':<7} {'bound (w, T, runs explored)':<28} verdict"
)


def _print_header() -> None:
    click.echo(_HEADER)
    click.echo("-" * len(_HEADER))


def _print_row(r: VerifyResult) -> None:
    from budgetcheck.verify.explain import verdict_name

    by_stage = {stage.stage: stage.verdict for stage in r.stages}
    c = [by_stage.get(name, "-") for name in _COLUMNS]
    bound = f"{r.bound.w_max}, {r.bound.horizon}, {r.bound.runs_explored}" if r.bound is not None else "-"
    verdict = verdict_name(r)
    click.echo(
        f"{r.mechanism:<22} {r.examples:>8} {r.runs:>6} {_worst(r):>17}  {c[0]:<7} {c[1]:<7} {c[2]:<7} {c[3]:<10} "
        f"{c[4]:<10} "
        f"{c[5]:<7} {bound:<28} {verdict}"
    )


def _print_details(results: list[VerifyResult], require: str) -> None:
    from budgetcheck.verify.explain import explain

    for r in results:
        for paragraph in explain(r, require):
            click.echo(f"\n{paragraph}")


def _junit(results: list[VerifyResult]) -> str:
    from xml.sax.saxutils import quoteattr

    cases = []
    failures = 0
    for r in results:
        bound = f" ({r.bound.describe()})" if r.bound is not None else ""
        verdict = quoteattr(f"{r.mechanism}: verdict")
        if r.outcome is Outcome.VIOLATED:
            failures += 1
            cases.append(
                f'  <testcase classname="budgetcheck.verify" name={verdict}><failure '
                f"message={quoteattr(r.outcome.value)}/></testcase>"
            )
        elif r.outcome is Outcome.INCONCLUSIVE:
            cases.append(
                f'  <testcase classname="budgetcheck.verify" name={verdict}><skipped '
                f"message={quoteattr(r.outcome.value)}/></testcase>"
            )
        else:
            cases.append(
                '  <testcase classname="budgetcheck.verify" '
                f"name={verdict}><system-out>{quoteattr(r.outcome.value + bound)[1:-1]}</system-out></testcase>"
            )
        for stage in r.stages:
            name = quoteattr(f"{r.mechanism}: {stage.stage}")
            if stage.verdict is Verdict.PASS:
                cases.append(f'  <testcase classname="budgetcheck.verify" name={name}/>')
            elif stage.verdict is Verdict.FAIL:
                failures += 1
                cases.append(
                    f'  <testcase classname="budgetcheck.verify" name={name}><failure '
                    f"message={quoteattr(stage.detail)}/></testcase>"
                )
            else:
                cases.append(
                    f'  <testcase classname="budgetcheck.verify" name={name}><skipped '
                    f"message={quoteattr(stage.verdict + ': ' + stage.detail)}/></testcase>"
                )
    body = "\n".join(cases)
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="budgetcheck verify" tests="{len(cases)}" '
        f'failures="{failures}">\n{body}\n</testsuite>\n'
    )


@main.command()
@click.argument("mechanism", nargs=-1)
@click.option("--w-min", default=1, show_default=True, type=click.IntRange(1))
@click.option("--w-max", default=128, show_default=True, type=click.IntRange(1))
@click.option(
    "--timeout", "timeout_s", default=60, show_default=True, type=click.IntRange(1), help="Seconds per solver query."
)
@click.option("--json", "as_json", is_flag=True)
@click.option("-q", "--quiet", is_flag=True, help="Only the table (no progress line, no details).")
def prove(mechanism: tuple[str, ...], w_min: int, w_max: int, timeout_s: int, as_json: bool, quiet: bool) -> None:
    """Prove with Z3 that each MECHANISM's allocation rule keeps every w-window within a symbolic ε.

    Default: every built-in mechanism; a built-in that exposes no rule (its budget is checked by
    ``verify`` to a bound) is listed as "not proved", named at the end, and does not change the exit
    code — a mechanism named on the command line always does. Each row is printed as soon as it is
    decided (with a progress line on a terminal). Exit codes: 0 all proved, 1 refuted, 3 unknown/not
    proved.
    """
    _require("verify")
    from budgetcheck.proving import prove_mechanism, rule_of

    references = list(mechanism)
    if not references:
        from mechanisms import BUILTIN

        references = list(BUILTIN)
    if w_min > w_max:
        raise click.BadParameter(f"--w-min={w_min} is larger than --w-max={w_max}")
    rows: list[dict[str, Any]] = []
    progress = Progress(enabled=not (as_json or quiet))
    proved: dict[object, tuple[str, dict[str, object]]] = {}  # one proof per rule (PBD, TSBD and BD share BDRule)
    try:
        targets = [load_mechanism(reference) for reference in references]  # a usage error before any proof runs
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="MECHANISM") from exc
    if not as_json:
        click.echo(f"{'mechanism':<22} {'w range':<10} {'method':<14} {'time':>9}  verdict")
    for target in targets:
        progress.show(f"proving {target.name} ({len(rows)} of {len(references)} done) ...")
        rule = rule_of(target)
        if rule is not None and rule in proved:
            first, row = proved[rule]
            rows.append({**row, "mechanism": target.name, "method": f"as {first}", "seconds": 0.0, "detail": ""})
            _prove_row(rows[-1], as_json, progress)
            continue
        found = prove_mechanism(target, range(w_min, w_max + 1), timeout_ms=timeout_s * 1000)
        rows.append(
            {
                "mechanism": target.name,
                "w": "-" if found.bounded else f"{w_min}..{w_max}",
                "method": found.method,
                "seconds": round(found.seconds, 3),
                "verdict": found.verdict,
                "detail": found.detail if found.verdict is not Verdict.PROVED or found.bounded else "",
            }
        )
        if rule is not None:
            proved[rule] = (target.name, rows[-1])
        _prove_row(rows[-1], as_json, progress)
    progress.clear()
    if as_json:
        unproved = [row["mechanism"] for row in rows if row["verdict"] is Verdict.NOT_PROVED]
        results = [{**row, "verdict": _prove_word(row)} for row in rows]
        click.echo(json.dumps({"version": 1, "results": results, "no_rule": unproved}, indent=2))
    elif not quiet:
        for row in rows:
            if row["detail"]:
                click.echo(f"\n{row['mechanism']}: {row['detail']}")
    unruled = [row["mechanism"] for row in rows if row["verdict"] is Verdict.NOT_PROVED] if not mechanism else []
    if unruled and not as_json and not quiet:
        click.echo(
            f"\n{len(unruled)} built-in mechanisms expose no allocation rule and are not proved: {', '.join(unruled)} "
            "(budgetcheck verify checks them to a bound)"
        )
    verdicts = {row["verdict"] for row in rows if row["mechanism"] not in unruled}
    sys.exit(
        EXIT_VIOLATION
        if Verdict.REFUTED in verdicts
        else EXIT_OK
        if verdicts == {Verdict.PROVED}
        else EXIT_INCONCLUSIVE
    )


def _worst(result: VerifyResult) -> str:
    """The worst window / ε of a verify row; a refused attempt is marked, so the figure agrees with a failure;
    ``-`` when no replay ran (``--stages c``, ``e``: nothing was measured, which is not a worst of 0)."""
    if not result.examples:
        return "-"
    return f"{result.worst_ratio:.6f}" + (" refused" if result.worst_refused else "")


def _hypothesis_cache() -> None:
    """Hypothesis keeps its files in the user's cache directory ($XDG_CACHE_HOME/budgetcheck or
    ~/.cache/budgetcheck), not in a `.hypothesis/` folder of the working directory; a user who set
    HYPOTHESIS_STORAGE_DIRECTORY keeps their choice."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    set_hypothesis_home_dir(os.path.join(base, "budgetcheck", "hypothesis"))


def _prove_word(row: dict[str, Any]) -> str:
    """The verdict in verify's vocabulary: an exhaustive check of a bounded family (Swellfish collections of
    at most 2 policies, horizon 5) that holds is *verified to a bound*, as verify says; *proved* is kept
    for the induction proofs that hold at every horizon."""
    if row["verdict"] is Verdict.PROVED and row["w"] == "-":
        return Outcome.BOUNDED.value
    return str(row["verdict"].value)


def _prove_row(row: dict[str, Any], as_json: bool, progress: Progress) -> None:
    """One decided row of ``prove``'s table, printed at once (JSON waits for the end)."""
    if not as_json:
        progress.clear()
        click.echo(
            f"{row['mechanism']:<22} {row['w']:<10} {row['method']:<14} {row['seconds']:>8.1f}s  {_prove_word(row)}"
        )


@main.command()
@click.argument("log", type=LedgerTarget(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--epsilon",
    type=float,
    default=None,
    help="The ε to check the windows against (default: the log's header; w-event logs and files).",
)
@click.option("--w", type=int, default=None, help="The window length w to check against (default: the log's header).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@click.option("--expect-head", default=None, help="Ledger files: the head hash you kept (detects a rolled-back file).")
@click.option(
    "--key",
    default=None,
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    help="Ledger files: the Ed25519 public key (PEM) whose signed checkpoints must all verify (exit 4 if not).",
)
def audit(
    log: Path | str, epsilon: float | None, w: int | None, as_json: bool, expect_head: str | None, key: Path | None
) -> None:
    """Re-check a ledger LOG offline: an exported JSON-lines log, a ledger file or a postgresql:// ledger URL
    (hash chain, head, every composition constraint; exit 4 if the chain is broken or the file damaged)."""
    from budgetcheck.durable.journal import is_journal, is_url

    if is_url(log) or is_journal(log):
        from budgetcheck.cli.publish import audit_ledger_file

        audit_ledger_file(log, expect_head, as_json, epsilon, w, key)
    log = Path(log)
    if key is not None:
        raise click.BadParameter(
            f"{str(key)!r}: {log} is an exported JSON-lines log, which holds no signed checkpoints; --key applies "
            "to ledger files",
            param_hint="--key",
        )
    if expect_head is not None:
        raise click.BadParameter(
            f"{expect_head!r}: {log} is an exported JSON-lines log, which has no hash chain and no head to check; "
            "--expect-head applies to ledger files",
            param_hint="--expect-head",
        )
    try:
        with log.open(encoding="utf-8") as handle:
            header, records = load_lines(handle)
        if header.notion in (Notion.PERSONALIZED, Notion.SWELLFISH):
            _audit_notion(log, header, records, as_json)
        report = audit_windows(
            records,
            epsilon=header.epsilon if epsilon is None else epsilon,
            w=header.w if w is None else w,
            runs=header.runs,
        )
    except InvalidArgument as exc:
        raise InputError(f"{log}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{log}: not a ledger log: it holds byte {exc.object[exc.start : exc.start + 1]!r}, which is not UTF-8 "
            "text (an exported log is JSON lines; a ledger file starts with an SQLite header)"
        ) from None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "version": 1,
                    "ok": report.ok,
                    "epsilon": report.epsilon,
                    "w": report.w,
                    "runs": report.runs,
                    "records": report.records,
                    "windows_checked": report.windows_checked,
                    "worst_window_over_epsilon": float(report.worst_ratio),
                    "violations": [v.describe(report.epsilon) for v in report.violations],
                    "violating_windows": report.violating_windows,
                },
                indent=2,
            )
        )
    else:
        click.echo(
            f"{log}: {report.records} records, {report.runs} runs, {report.windows_checked} windows checked "
            f"against epsilon={report.epsilon!r}, w={report.w}"
        )
        if report.worst is not None:
            click.echo(f"worst: {report.worst.describe(report.epsilon)}")
        for violation in report.violations:
            click.echo(f"VIOLATION {violation.describe(report.epsilon)}")
        unlisted = report.violating_windows - len(report.violations)
        if unlisted > 0:
            click.echo(f"... and {unlisted} more windows over epsilon (the first {len(report.violations)} are listed)")
        click.echo("ok" if report.ok else "FAIL")
    sys.exit(EXIT_OK if report.ok else EXIT_VIOLATION)


def _audit_notion(log: Path, header: LedgerHeader, records: list[SpendRecord], as_json: bool) -> None:
    """Personalized (every class's windows) or Swellfish (every policy's goal-affected sets) audit; exits."""
    from budgetcheck.ledger.audit_notions import audit_by_header

    result = audit_by_header(records, header)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "version": 1,
                    "notion": header.notion,
                    "ok": result.ok,
                    "runs": header.runs,
                    "records": len(records),
                    "constraints_checked": result.checked,
                    "worst_over_budget": float(result.worst_ratio),
                    "violations": list(result.violations),
                },
                indent=2,
            )
        )
    else:
        click.echo(
            f"{log}: {header.notion} ledger, {len(records)} records, {header.runs} runs, {result.checked} constraints "
            "checked"
        )
        click.echo(f"worst: {float(result.worst_ratio):.6f} of the budget")
        for violation in result.violations:
            click.echo(f"VIOLATION {violation}")
        click.echo("ok" if result.ok else "FAIL")
    sys.exit(EXIT_OK if result.ok else EXIT_VIOLATION)


@main.command(name="mechanisms")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, notion, description}.")
def list_mechanisms(as_json: bool) -> None:
    """List the built-in mechanisms: name, privacy notion, what each does."""
    from budgetcheck.mechanism.execute import notion_of
    from mechanisms import BUILTIN

    rows = []
    for name, factory in BUILTIN.items():
        doc = (factory.__doc__ or "").strip().splitlines()
        rows.append({"name": name, "notion": notion_of(factory()), "description": _plain(doc[0] if doc else "")})
    if as_json:
        click.echo(json.dumps({"version": 1, "mechanisms": rows}, indent=2, ensure_ascii=False))
        return
    width = max(len(row["name"]) for row in rows)
    click.echo(f"{'mechanism':<{width}}  {'notion':<12}  description")
    for row in rows:
        click.echo(f"{row['name']:<{width}}  {row['notion']:<12}  {row['description']}")


def _plain(text: str) -> str:
    """A docstring line as plain words: reST literals (``x``) and roles (:class:`x`) lose their marks."""
    return re.sub(r":\w+:`([^`]*)`", r"\1", text).replace("``", "")


@main.group(invoke_without_command=True)
@click.option(
    "--quick", "grid", flag_value="quick", default=True, help="The small embedded grid (default; under a minute)."
)
@click.option("--paper", "grid", flag_value="paper", help="The paper's full grid (Schäler et al. 2022, Table 4).")
@click.option(
    "--config",
    "config",
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A benchmark TOML file (see examples/benchmark.toml).",
)
@click.option("--mechanism", multiple=True, help="Only these mechanisms (repeatable).")
@click.option("--stream", multiple=True, help="Only these streams (repeatable).")
@click.option("--epsilon", multiple=True, type=float, help="Only these ε (repeatable).")
@click.option("--w", "ws", multiple=True, type=int, help="Only these w (repeatable).")
@click.option(
    "--runs", type=click.IntRange(1), default=None, help="Runs per cell (default: the grid's, 100 for --paper)."
)
@click.option(
    "--streams-per-cell",
    type=click.IntRange(1),
    default=None,
    help="Random streams per artificial cell, each run --runs times (default: the grid's; "
    "4 for --quick, 1 for --paper).",
)
@click.option(
    "--growth",
    type=float,
    default=1.5,
    show_default=True,
    help="Growth base of the artificial streams (--paper; 1.3 = the public harness).",
)
@click.option(
    "--mre-bound",
    type=float,
    default=0.001,
    show_default=True,
    help="MRE sanity bound γ_d as a fraction of Σ_t Q(D_t)[d] (--paper; 0.01 = the harness).",
)
@click.option(
    "--results",
    type=OutputPath(),
    default=None,
    help="Results database (SQLite); an existing one is resumed. Default: bench-<grid>.sqlite.",
)
@click.option("-j", "--jobs", type=click.IntRange(1), default=1, show_default=True, help="Local worker processes.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True)
@click.option("--scheduler", default=None, help="Dask scheduler address (with --executor dask), e.g. tcp://host:8786.")
@click.option(
    "--export",
    type=OutputPath(),
    default=None,
    help="Also export the rows to .csv or .parquet.",
)
@click.option(
    "--report",
    "report_dir",
    type=FilePath(file_okay=False, path_type=Path),
    default=None,
    help="Also write the report (tables, figures) into this directory.",
)
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the cells' summaries and findings as JSON instead of tables."
)
@click.option(
    "--trusted-code",
    is_flag=True,
    help="Allow the mechanisms' own code to read true values in this process (isolation='trusted'); refused by "
    "default.",
)
@click.option(
    "--allow-vouched",
    is_flag=True,
    help="Allow charges at a sensitivity a mechanism vouches for (ledger.measure); refused by default.",
)
@click.pass_context
def bench(
    ctx: click.Context,
    grid: str,
    config: Path | None,
    mechanism: tuple[str, ...],
    stream: tuple[str, ...],
    epsilon: tuple[float, ...],
    ws: tuple[int, ...],
    runs: int | None,
    streams_per_cell: int | None,
    growth: float,
    mre_bound: float,
    results: Path | None,
    jobs: int,
    executor: str,
    scheduler: str | None,
    export: Path | None,
    report_dir: Path | None,
    progress: bool,
    as_json: bool,
    trusted_code: bool,
    allow_vouched: bool,
) -> None:
    """Run the utility benchmark (Schäler, Hütter, Schäler 2022) and print its result tables.

    Every cell is stored as it finishes; run the same command again to resume.
    """
    if ctx.invoked_subcommand is not None:  # each checks the extra itself, after its --help
        return
    _require("bench")
    from budgetcheck.bench import Benchmark, run_benchmark, text_report, write_report
    from budgetcheck.bench.store import ResultStore
    from budgetcheck.ledger.errors import BudgetcheckError

    if executor == "dask" and not scheduler:
        raise click.UsageError("--executor dask needs --scheduler ADDRESS")
    if scheduler and executor != "dask":
        raise click.UsageError("--scheduler needs --executor dask")
    try:
        if config is not None:
            base, name = Benchmark.from_toml(config), config.stem
        elif grid == "paper":
            base, name = Benchmark.paper(growth=growth, mre_bound=mre_bound), "paper"
        else:
            base, name = Benchmark.quick(), "quick"
        chosen = base.select(
            mechanisms=mechanism, streams=stream, epsilons=epsilon, ws=ws, runs=runs, streams_per_cell=streams_per_cell
        )
        chosen = attrs.evolve(chosen, trusted_code=trusted_code, allow_vouched=allow_vouched)
        target = results or Path(f"bench-{name}.sqlite")
        ran, stored = run_benchmark(chosen, target, jobs=jobs, scheduler=scheduler, progress=progress)
        text, uniform_ok = text_report(target)
        if as_json:
            click.echo(json.dumps(_bench_json(target, ran, stored, uniform_ok), indent=2))
        else:
            click.echo(f"{target}: {ran} cells run now, {stored} stored before, {len(chosen.cells())} in the grid")
            click.echo(text)
        if export is not None:
            with ResultStore(target) as store:
                click.echo(f"exported {store.export(export)} rows to {export}")
        if report_dir is not None:
            written = write_report(target, report_dir)
            click.echo(f"report: {', '.join(str(p) for p in written.files)}")
    except BudgetcheckError as exc:
        raise InputError(str(exc)) from exc
    sys.exit(EXIT_OK if uniform_ok else EXIT_VIOLATION)


def _bench_json(target: Path, ran: int, stored: int, uniform_ok: bool) -> dict[str, object]:
    """The results file's cell summaries and per-setting findings, as ``bench --json`` prints them."""
    from budgetcheck.bench.report import findings, summarize
    from budgetcheck.bench.store import ResultStore

    with ResultStore(target) as store:
        summaries = summarize(store)
    return {
        "version": 1,
        "results": str(target),
        "cells_run_now": ran,
        "cells_stored_before": stored,
        "uniform_ok": uniform_ok,
        "cells": [
            {
                "mechanism": s.cell.mechanism,
                "stream": s.cell.stream,
                "epsilon": s.cell.epsilon,
                "w": s.cell.w,
                "runs": s.runs,
                "mae_mean": s.mae_mean,
                "mae_q95": s.mae_q95,
                "mre_mean": s.mre_mean,
                "mre_q95": s.mre_q95,
                "streams": s.streams,
                "stream_mae_std": s.stream_mae_std,
                "stream_mae_min": s.stream_mae_min,
                "stream_mae_max": s.stream_mae_max,
            }
            for s in summaries
        ],
        "findings": [
            {
                "stream": f.stream,
                "epsilon": f.epsilon,
                "w": f.w,
                "best": f.best,
                "best_mae": f.best_mae,
                "baseline": f.baseline,
                "baseline_mae": f.baseline_mae,
                "baseline_supremacy": f.supremacy,
            }
            for f in findings(summaries)
        ],
    }


@bench.command(name="report")
@click.argument("results", type=FilePath(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=FilePath(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the tables and figures (default: RESULTS without suffix + -report).",
)
@click.option(
    "--kind",
    type=click.Choice(["auto", "benchmark", "personalized", "swellfish"]),
    default="auto",
    show_default=True,
    help="What RESULTS holds: bench's SQLite file, bench personalized's OUT/personalized.jsonl or bench "
    "swellfish's OUT/progress.jsonl (auto: read from the file).",
)
def bench_report(results: Path, out: Path | None, kind: str) -> None:
    """Tables and figures of a results file, in the papers' form.

    \b
    bench: Schäler et al. 2022's Figure 2 (δ_MAE), Table 6 with the baseline-supremacy verdict, error curves.
    personalized: Du et al. 2025's Figures 10-17 (AMRE, AJSD, run time) and the comparison with §5.4.
    swellfish: Tex et al.'s Figures 4-6 (per-household box plots) and Tables 2 and 3 (TEAS, TINAR).
    A file of another kind, or a damaged one, exits 2 naming it.
    """
    _require("bench")
    from budgetcheck.bench import write_report
    from budgetcheck.bench.study_report import detect, write_personalized_report, write_swellfish_report
    from budgetcheck.ledger.errors import BudgetcheckError

    target = out or results.with_name(results.stem + "-report")
    try:
        found = detect(results)
        if kind != "auto" and kind != found:
            raise InvalidArgument(f"results file {str(results)!r} holds {found} results, not --kind {kind}")
        if found == "benchmark":
            written = write_report(results, target)
            click.echo(written.text)
            click.echo(f"wrote {', '.join(str(p) for p in written.files)}")
            sys.exit(EXIT_OK if written.uniform_ok else EXIT_VIOLATION)
        writer = write_personalized_report if found == "personalized" else write_swellfish_report
        study = writer(results, target)
    except BudgetcheckError as exc:
        raise InputError(str(exc)) from exc
    click.echo(study.text)
    click.echo(f"wrote {', '.join(str(p) for p in study.files)}")


@bench.command(
    name="personalized",
    short_help="The personalized w-event study (Du et al. 2025, §5): PBD, PBA vs their baselines.",
)
@click.option(
    "--paper", is_flag=True, help="The paper's scale: 10,000 users, T = 1000, 10 runs, every point of Table 3."
)
@click.option(
    "--out", type=FilePath(file_okay=False, path_type=Path), default=Path("personalized-study"), show_default=True
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0))
@click.option(
    "--taxi",
    type=FilePath(path_type=Path),
    default=None,
    help="Du et al.'s Taxi stream: the T-Drive folder of per-taxi .txt files (id,time,lon,lat).",
)
@click.option(
    "--foursquare",
    type=FilePath(path_type=Path),
    default=None,
    help="Du et al.'s Foursquare stream: the folder holding dataset_TIST2015_Checkins.txt and _POIs.txt.",
)
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Choice(["TLNS", "Sin", "Log"]),
    help="Synthetic data sets to run (repeatable; default all three, none with --real-only).",
)
@click.option("--real-only", is_flag=True, help="Run only the real streams given by --taxi and --foursquare.")
@click.option(
    "--mechanism",
    "mechanisms",
    multiple=True,
    help="Personalized mechanism to run (repeatable; default PBD, PBA, StrictestBD, StrictestBA, PLBU; "
    "also e.g. LBU, LSP, LBD, LBA, LPD, LPA or module:attr).",
)
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True)
@click.option(
    "--scheduler", default=None, help="Dask scheduler address (with --executor dask), e.g. tcp://127.0.0.1:8786."
)
def bench_personalized(
    paper: bool,
    out: Path,
    seed: int,
    taxi: Path | None,
    foursquare: Path | None,
    datasets: tuple[str, ...],
    real_only: bool,
    mechanisms: tuple[str, ...],
    executor: str,
    scheduler: str | None,
) -> None:
    """The personalized w-event study (Du et al. 2025, §5): PBD, PBA vs BD, BA under the strictest requirement
    and the LDP baseline PLBU, on TLNS, Sin, Log and, from your downloads, Taxi and Foursquare.

    A missing or malformed download exits 2 naming the file, before any run. Every finished point is
    stored in OUT/personalized-progress.jsonl: run the same command again to resume. With --executor dask
    the points run on the workers of the Dask scheduler at --scheduler."""
    _require("bench")
    from budgetcheck.bench import personalized_study as study
    from budgetcheck.ledger.errors import BudgetcheckError

    if executor == "dask" and not scheduler:
        raise click.UsageError("--executor dask needs --scheduler ADDRESS")
    if scheduler and executor != "dask":
        raise click.UsageError("--scheduler needs --executor dask")
    real = {name: path for name, path in (("Taxi", taxi), ("Foursquare", foursquare)) if path is not None}
    if real_only and not real:
        raise InputError("--real-only needs --taxi PATH or --foursquare PATH")
    if real_only and datasets:
        raise InputError(f"--real-only runs no synthetic data set, yet --dataset {' '.join(datasets)} was given")
    synthetic = () if real_only else datasets or study.DATASETS
    users, length, runs = (10_000, 1000, 10) if paper else (1000, 300, 3)
    scale = dict(users=users, length=length, runs=runs)

    def quick_points(n: int) -> list[study.PersonalizedPoint]:
        return study.experiments(n, epsilons=(0.2, 1.0), ws=(40, 200), ratios=(0.1, 0.9))

    try:
        rows = study.run_study(
            users=users,
            length=length,
            runs=runs,
            seed=seed,
            datasets=synthetic,
            points=None if paper else quick_points,
            mechanisms=mechanisms or study.MECHANISMS,
            progress=lambda line: click.echo(line, err=True),
            real=real,
            progress_file=out / "personalized-progress.jsonl",
            scheduler=scheduler,
        )
    except BudgetcheckError as exc:
        raise InputError(str(exc)) from exc
    except OSError as exc:
        raise InputError(f"cannot read {exc.filename!r}: {exc.strerror}") from exc
    params = {**scale, "seed": seed, "scale": "paper" if paper else "quick"}
    params |= {f"{name.lower()}_path": str(path) for name, path in real.items()}
    files = study.write_study(rows, out, params)
    click.echo(study.study_table(rows))
    click.echo(f"wrote {', '.join(str(p) for p in files)}")


@bench.command(name="swellfish")
@click.option("--paper", is_flag=True, help="The paper's scale: 55 households, 100 runs, T = 2000, three zones.")
@click.option(
    "--out", type=FilePath(file_okay=False, path_type=Path), default=Path("swellfish-study"), show_default=True
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0))
@click.option(
    "-j",
    "--jobs",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Local worker processes (one household at a time each).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "dask"]),
    default="local",
    show_default=True,
    help="local: --jobs processes here; dask: one task per household and zone on the cluster at --scheduler.",
)
@click.option("--scheduler", default=None, help="Dask scheduler address (with --executor dask), e.g. tcp://host:8786.")
def bench_swellfish(paper: bool, out: Path, seed: int, jobs: int, executor: str, scheduler: str | None) -> None:
    """The Swellfish case study (Tex et al., §5): TEAS and TINAR (intrinsic) and Unicorn vs TSBD, TSBA, RescueDP.

    Every finished household is stored in OUT/progress.jsonl: run the same command again to resume
    (with either executor)."""
    _require("bench")
    from budgetcheck.bench import swellfish_study as study
    from budgetcheck.ledger.errors import BudgetcheckError

    if executor == "dask" and not scheduler:
        raise click.UsageError("--executor dask needs --scheduler ADDRESS")
    if scheduler and executor != "dask":
        raise click.UsageError("--scheduler needs --executor dask")
    if scheduler and jobs > 1:
        raise click.UsageError(f"--jobs {jobs} runs local processes; with --executor dask the cluster's workers run")
    length = 2000 if paper else 1000
    scale = dict(households=55, runs=100) if paper else dict(zones=(500.0, 50000.0), households=2, runs=5)
    try:
        rows = study.run_study(
            **scale,
            length=length,
            seed=seed,
            jobs=jobs,
            progress_file=out / "progress.jsonl",
            progress=lambda line: click.echo(line, err=True),
            scheduler=scheduler,
        )
    except BudgetcheckError as exc:
        raise InputError(str(exc)) from exc
    files = study.write_study(rows, out, length=length, seed=seed)
    click.echo(study.study_table(rows, length=length, seed=seed))
    click.echo(f"wrote {', '.join(str(p) for p in files)}")


def _register() -> None:
    from budgetcheck.cli.keys import keygen, sign
    from budgetcheck.cli.publish import publish

    main.add_command(publish)
    main.add_command(keygen)
    main.add_command(sign)


_register()


if __name__ == "__main__":
    main()
