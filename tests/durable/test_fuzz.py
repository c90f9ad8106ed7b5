"""Hostile inputs: every public entry point either works or raises a budgetcheck error with a
message, never an internal exception, and a ledger is unchanged after an error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.publish import parse_rows
from budgetcheck.stream.events import load_requirements, parse_events, timestamps

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.just(float("nan")),
    st.just(-0.0),
    st.just(1e-320),
    st.just(2**63),
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner)),
    max_leaves=8,
)
numbers = st.one_of(scalars, st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3))


REFUSED = object()


def works_or_refuses(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn's result, or REFUSED if it raised a budgetcheck error (with a message); anything else fails."""
    try:
        return fn(*args, **kwargs)
    except bc.BudgetcheckError as exc:
        assert str(exc), f"{type(exc).__name__} without a message"
        return REFUSED


def state(ledger: bc.WindowLedger) -> tuple[Any, ...]:
    return ledger.t, len(ledger.records), ledger.window_sum(max(ledger.t, 1)), ledger.refusals


@FUZZ
@given(epsilon=values, w=values, runs=values, seed=values, sampler=values)
def test_constructors(epsilon: Any, w: Any, runs: Any, seed: Any, sampler: Any) -> None:
    params = works_or_refuses(bc.WEventParams, epsilon=epsilon, w=w)
    if params is not REFUSED:
        assert math.isfinite(params.epsilon) and params.epsilon > 0 and params.w >= 1
        works_or_refuses(bc.WindowLedger, params, runs=runs, seed=seed, sampler=sampler)
    works_or_refuses(bc.GuardedStream, epsilon)
    works_or_refuses(bc.RequirementSet, w)
    works_or_refuses(bc.StreamPolicy, epsilon, w, runs)
    works_or_refuses(bc.PolicyCollection, seed)
    works_or_refuses(bc.LiveStream, [], dimensions=runs)


@FUZZ
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["spend", "laplace", "bins", "dissimilarity", "remaining", "measure"]),
            values,
            numbers,
            values,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_ledger_operations_leave_no_trace_when_they_fail(calls: list[tuple[str, Any, Any, Any]]) -> None:
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(np.ones((6, 2)))
    ledger.bind(stream)
    for name, t, epsilon, extra in calls:
        before = state(ledger)
        secret = stream.secret(t) if isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 6 else t
        operation = {
            "spend": lambda: ledger.spend(t, epsilon, purpose=str(extra)),
            "laplace": lambda: ledger.laplace(secret, epsilon, sensitivity=extra if isinstance(extra, float) else 1.0),
            "bins": lambda: ledger.laplace_bins(secret, epsilon),
            "dissimilarity": lambda: ledger.dissimilarity(secret, extra, epsilon),
            "remaining": lambda: ledger.remaining(t),
            "measure": lambda: ledger.measure(lambda v: v.sum(), secret, sensitivity=extra, epsilon=epsilon),
        }[name]
        if works_or_refuses(operation) is REFUSED and name != "remaining":
            after = state(ledger)
            assert after[:3] == before[:3], (name, t, epsilon, extra)


@FUZZ
@given(pairs=values, t=values, epsilon=numbers)
def test_personalized_and_swellfish_inputs(pairs: Any, t: Any, epsilon: Any) -> None:
    reqs = works_or_refuses(bc.RequirementSet, pairs)
    ledger = bc.PersonalizedLedger(bc.RequirementSet([(2, 1.0), (3, 0.5)]), sampler="numpy-laplace", keep_records=True)
    before = ledger.window_sum(1)
    if works_or_refuses(ledger.spend, t, epsilon, purpose="fuzz") is REFUSED:
        assert ledger.window_sum(1) == before and ledger.t == 0
    if reqs is not REFUSED:
        works_or_refuses(bc.PersonalizedStream, reqs, t, dimensions=2)
    policies = works_or_refuses(
        lambda: (
            bc.PolicyCollection([bc.StreamPolicy(*(list(pairs) + [1, 1, 1])[:3])])
            if isinstance(pairs, (list, tuple))
            else None
        )
    )
    if policies not in (None, REFUSED):
        works_or_refuses(bc.SwellfishLedger, policies, epsilon=epsilon)


@FUZZ
@given(lines=st.lists(st.text(max_size=40), max_size=6), d=st.integers(-1, 3))
def test_loaders_of_logs_and_rows(lines: list[str], d: int) -> None:
    works_or_refuses(bc.load_lines, lines)
    for fmt in ("csv", "jsonl"):
        rows = works_or_refuses(lambda: list(parse_rows(lines, fmt=fmt, dimensions=d, integers=True)))
        for row in [] if rows is REFUSED else rows:
            assert isinstance(row, (tuple, bc.InvalidArgument))


user_lines = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda t, u, b: f"{t},{u},{b}",
            st.sampled_from(["1", "2", "0", "x", "2.0", "-3"]),
            st.sampled_from(["ann", "zed", "", "1"]),
            st.sampled_from(["0", "2", "9", "-1", "b", ""]),
        ),
    ),
    max_size=8,
)


@FUZZ
@given(
    requirement_lines=st.lists(st.text(max_size=30), max_size=4),
    lines=user_lines,
    d=st.integers(-1, 3),
    published=st.integers(0, 2),
)
def test_loaders_of_requirements_and_user_rows(
    requirement_lines: list[str], lines: list[str], d: int, published: int
) -> None:
    requirements = works_or_refuses(load_requirements, [*requirement_lines, "ann,2,1.0"])
    if requirements is REFUSED:
        return
    for fmt in ("csv", "jsonl"):
        events = works_or_refuses(lambda: list(parse_events(lines, fmt=fmt)))
        if events is REFUSED:
            continue
        bad: list[bc.InvalidArgument] = []
        groups = works_or_refuses(
            lambda: list(timestamps(iter(events), requirements, dimensions=d, published=published, skip=bad.append))
        )
        for t, counts in [] if groups is REFUSED else groups:
            assert t > published and counts.shape == (requirements.n_classes, d) and (counts >= 0).all()


@FUZZ
@given(blob=st.binary(max_size=300), sqlite_like=st.booleans())
def test_ledger_file_reader_on_garbage(tmp_path_factory: Any, blob: bytes, sqlite_like: bool) -> None:
    path = Path(tmp_path_factory.mktemp("fuzz")) / "ledger.db"
    path.write_bytes((b"SQLite format 3\x00" if sqlite_like else b"") + blob)
    works_or_refuses(bc.audit_file, path)
    works_or_refuses(
        bc.open_ledger, path, bc.WindowLedger(bc.WEventParams(1.0, 2), sampler="numpy-laplace", keep_records=True)
    )


@FUZZ
@given(
    argv=st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "publish",
                    "audit",
                    "mechanisms",
                    "--epsilon",
                    "--w",
                    "-d",
                    "--ledger",
                    "--input",
                    "--out",
                    "--sampler",
                    "--format",
                    "Uniform",
                    "BD",
                    "PBD",
                    "--requirements",
                    "nan",
                    "-1",
                    "0",
                ]
            ),
            st.text(max_size=6),
        ),
        max_size=8,
    )
)
def test_cli_arguments(argv: list[str]) -> None:
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (0, 1, 2, 3, 4), (argv, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (argv, repr(result.exception))
