"""The one thin module between budgetcheck and Z3: terms, the Z3 back-end of ``Ops``, verdicts.

Solver seeds are fixed and every query has a timeout; a timeout or ``unknown`` answer is reported
as such and is never a pass.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import z3


class Answer(enum.Enum):
    """What one satisfiability query returned."""

    SAT = "sat"
    UNSAT = "unsat"
    UNKNOWN = "unknown"


def real(name: str) -> Any:
    return z3.Real(name)


def integer(name: str) -> Any:
    return z3.Int(name)


def boolean(name: str) -> Any:
    return z3.Bool(name)


def conj(terms: Sequence[Any]) -> Any:
    return z3.And(*terms) if terms else z3.BoolVal(True)


def disj(terms: Sequence[Any]) -> Any:
    return z3.Or(*terms) if terms else z3.BoolVal(False)


def specialise(terms: Sequence[Any], case: Any) -> list[Any]:
    """Terms under a case: equalities ``x == value`` (alone or in a conjunction) are substituted."""
    parts = list(case.children()) if z3.is_and(case) else [case]
    pairs = []
    rest = []
    for part in parts:
        if z3.is_eq(part) and z3.is_const(part.arg(0)) and _is_value(part.arg(1)):
            pairs.append((part.arg(0), part.arg(1)))
        elif z3.is_const(part) and z3.is_bool(part) and not z3.is_true(part) and not z3.is_false(part):
            pairs.append((part, z3.BoolVal(True)))
        elif z3.is_not(part) and z3.is_const(part.arg(0)):
            pairs.append((part.arg(0), z3.BoolVal(False)))
        else:
            rest.append(part)
    if not pairs:
        return [*terms, case]
    return [z3.simplify(z3.substitute(t, *pairs)) for t in terms] + rest


def _is_value(term: Any) -> bool:
    return bool(z3.is_int_value(term) or z3.is_rational_value(term) or z3.is_true(term) or z3.is_false(term))


def implies(a: Any, b: Any) -> Any:
    return z3.Implies(a, b)


def check(constraints: Sequence[Any], *, timeout_ms: int) -> tuple[Answer, Any]:
    """Check the conjunction; returns the answer and the model when SAT."""
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.set("random_seed", 0)
    solver.add(*constraints)
    result = solver.check()
    if result == z3.sat:
        return Answer.SAT, solver.model()
    if result == z3.unsat:
        return Answer.UNSAT, None
    return Answer.UNKNOWN, solver.reason_unknown()


def evaluate_bool(model: Any, term: Any) -> bool:
    return bool(z3.is_true(model.eval(term, model_completion=True)))


def evaluate_number(model: Any, term: Any) -> float:
    value = model.eval(term, model_completion=True)
    if z3.is_int_value(value):
        return float(value.as_long())
    return float(value.as_fraction())


class Z3Ops:
    """The Z3 back-end of ``Ops``: exact real arithmetic on symbolic terms.

    ``share(total, parts)`` introduces a fresh real u with 0 < u and parts·u <= total (what the
    float back-end guarantees), recorded in ``assumptions``; the same (total, parts) gets the
    same u.
    """

    def __init__(self) -> None:
        self.assumptions: list[Any] = []
        self._shares: dict[tuple[str, int], Any] = {}

    def where(self, condition: Any, if_true: Any, if_false: Any) -> Any:
        return z3.If(condition, if_true, if_false)

    def minimum(self, a: Any, b: Any) -> Any:
        return z3.If(a <= b, a, b)

    def both(self, a: Any, b: Any) -> Any:
        return z3.And(a, b)

    def negate(self, a: Any) -> Any:
        return z3.Not(a)

    def all_of(self, terms: Sequence[Any]) -> Any:
        return conj(list(terms))

    def implies(self, a: Any, b: Any) -> Any:
        return z3.Implies(a, b)

    def define(self, name: str, term: Any) -> Any:
        variable = z3.Const(f"{name}!{len(self.assumptions)}", term.sort()) if z3.is_expr(term) else term
        if z3.is_expr(term):
            self.assumptions.append(variable == term)
        return variable

    def sum_up(self, values: Any) -> Any:
        terms = list(values)
        return z3.Sum(terms) if terms else z3.RealVal(0)

    def sub_down(self, value: Any, subtrahend: Any) -> Any:
        return z3.If(value - subtrahend >= 0, value - subtrahend, z3.RealVal(0))

    def half_down(self, value: Any) -> Any:
        return value / 2

    def mul_down(self, value: Any, count: Any, at_most: int | None = None) -> Any:
        if at_most is not None and z3.is_expr(count) and not z3.is_int_value(count):
            # value · count as Σ_{c=1..at_most} [count >= c] · value: linear in value.
            return z3.Sum([z3.If(count >= c, value, z3.RealVal(0)) for c in range(1, at_most + 1)]) if at_most else z3.RealVal(0)
        return value * z3.ToReal(count) if z3.is_int(count) else value * count

    def share(self, total: Any, parts: int) -> Any:
        key = (str(total), parts)
        if key not in self._shares:
            unit = z3.Real(f"share_{parts}_of_{len(self._shares)}")
            self._shares[key] = unit
            self.assumptions += [unit > 0, unit * parts <= total]
        return self._shares[key]
