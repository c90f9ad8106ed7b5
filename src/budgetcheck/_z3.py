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


def negation(term: Any) -> Any:
    return z3.Not(term)


def disj(terms: Sequence[Any]) -> Any:
    return z3.Or(*terms) if terms else z3.BoolVal(False)


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
        return negation(a)

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
            # value · count for an integer 0 <= count <= at_most, kept linear: count is written in
            # binary with fresh bits b_i (count == Σ b_i 2^i) and the product is Σ b_i · 2^i · value.
            index = len(self.assumptions)
            bits = [z3.Bool(f"bit{index}_{i}") for i in range(max(1, at_most.bit_length()))]
            self.assumptions.append(count == z3.Sum([z3.If(b, 2**i, 0) for i, b in enumerate(bits)]))
            return z3.Sum([z3.If(b, value * (2**i), z3.RealVal(0)) for i, b in enumerate(bits)])
        return value * z3.ToReal(count) if z3.is_int(count) else value * count

    def fraction_down(self, value: Any, numerator: int, denominator: int) -> Any:
        return value * z3.RealVal(numerator) / z3.RealVal(denominator)

    def share(self, total: Any, parts: int) -> Any:
        key = (str(total), parts)
        if key not in self._shares:
            unit = z3.Real(f"share_{parts}_of_{len(self._shares)}")
            self._shares[key] = unit
            self.assumptions += [unit > 0, unit * parts <= total]
        return self._shares[key]
