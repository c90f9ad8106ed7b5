"""The one thin module between budgetcheck and Z3: terms, the Z3 back-end of ``Ops``, verdicts.

Solver seeds are fixed and every query has a timeout; a timeout or ``unknown`` answer is reported
as such and is never a pass.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import z3

from budgetcheck.ledger.sliding import PlainWindows


class Answer(enum.Enum):
    """What one satisfiability query returned."""

    SAT = "sat"
    UNSAT = "unsat"
    UNKNOWN = "unknown"


def real(name: str) -> Any:
    return z3.Real(name)


def real_value(value: int) -> Any:
    return z3.RealVal(value)


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


_HOMOGENEOUS, _CONSTANT, _ZERO, _INVARIANT = "homogeneous", "constant", "zero", "invariant"
_COMPARISONS = frozenset({z3.Z3_OP_LE, z3.Z3_OP_LT, z3.Z3_OP_GE, z3.Z3_OP_GT, z3.Z3_OP_EQ, z3.Z3_OP_DISTINCT})
_CONNECTIVES = frozenset(
    {z3.Z3_OP_AND, z3.Z3_OP_OR, z3.Z3_OP_NOT, z3.Z3_OP_IMPLIES, z3.Z3_OP_XOR, z3.Z3_OP_TRUE, z3.Z3_OP_FALSE}
)


def _combined(kinds: Sequence[str | None]) -> str | None:
    """The kind of a sum (or of both branches of an If): every part of one degree, zeros fit both."""
    if None in kinds:
        return None
    found = set(kinds) - {_ZERO}
    if len(found) > 1:
        return None
    return found.pop() if found else _ZERO


def _kind(term: Any, memo: dict[int, str | None]) -> str | None:
    """How ``term`` behaves when every real variable is multiplied by the same λ > 0.

    Real terms are ``homogeneous`` (scale by λ), ``constant`` (do not change), or ``zero``
    (both); Boolean and integer terms are ``invariant`` when their value cannot change. None: none
    of these (for example x·y, x + 1 or x <= 1 for real x, y). Walks the raw ASTs without
    recursion (terms can be deep); the caller holds ``term``, which keeps every sub-AST alive.
    """
    ctx = term.ctx_ref()
    stack: list[tuple[Any, bool]] = [(term.as_ast(), False)]
    arguments: dict[int, list[Any]] = {}
    while stack:
        node, expanded = stack.pop()
        key = z3.Z3_get_ast_id(ctx, node)
        if key in memo:
            continue
        if expanded:
            memo[key] = _node_kind(ctx, node, [memo[z3.Z3_get_ast_id(ctx, a)] for a in arguments.pop(key)])
            continue
        app = z3.Z3_to_app(ctx, node)
        arguments[key] = [z3.Z3_get_app_arg(ctx, app, i) for i in range(z3.Z3_get_app_num_args(ctx, app))]
        stack.append((node, True))
        stack.extend((a, False) for a in arguments[key] if z3.Z3_get_ast_id(ctx, a) not in memo)
    return memo[z3.Z3_get_ast_id(ctx, term.as_ast())]


def _node_kind(ctx: Any, node: Any, children: list[str | None]) -> str | None:
    """:func:`_kind` of one node, given the kinds of its children."""
    sort = z3.Z3_get_sort_kind(ctx, z3.Z3_get_sort(ctx, node))
    numeral = z3.Z3_get_ast_kind(ctx, node) == z3.Z3_NUMERAL_AST
    op = z3.Z3_get_decl_kind(ctx, z3.Z3_get_app_decl(ctx, z3.Z3_to_app(ctx, node)))
    variable = not children and op == z3.Z3_OP_UNINTERPRETED
    if sort == z3.Z3_INT_SORT:
        return _INVARIANT if op != z3.Z3_OP_TO_INT and None not in children else None
    if sort == z3.Z3_BOOL_SORT:
        if variable:
            return _INVARIANT
        if op in _CONNECTIVES:
            return _INVARIANT if all(c == _INVARIANT for c in children) else None
        if op == z3.Z3_OP_ITE:
            return _INVARIANT if children[0] == _INVARIANT and _combined(children[1:]) == _INVARIANT else None
        if op in _COMPARISONS:
            return _INVARIANT if _combined(children) is not None else None
        return None
    if sort != z3.Z3_REAL_SORT:
        return None
    if numeral:
        return _ZERO if Fraction(z3.Z3_get_numeral_string(ctx, node)) == 0 else _CONSTANT
    if variable:
        return _HOMOGENEOUS
    if op == z3.Z3_OP_TO_REAL:
        return _CONSTANT if children == [_INVARIANT] else None
    if op in (z3.Z3_OP_ADD, z3.Z3_OP_SUB, z3.Z3_OP_UMINUS):
        return _combined(children)
    if op == z3.Z3_OP_ITE:
        return _combined(children[1:]) if children[0] == _INVARIANT else None
    if op == z3.Z3_OP_MUL:
        return _product(children)
    if op == z3.Z3_OP_DIV:
        return children[0] if children[1] == _CONSTANT else None
    return None


def _product(kinds: Sequence[str | None]) -> str | None:
    if None in kinds:
        return None
    if _ZERO in kinds:
        return _ZERO
    degree = sum(k == _HOMOGENEOUS for k in kinds)
    return {0: _CONSTANT, 1: _HOMOGENEOUS}.get(degree)


def scale_invariant(constraints: Sequence[Any], memo: dict[int, str | None] | None = None) -> bool:
    """True when no constraint changes its truth value if every real variable is scaled by one λ > 0.

    Then a model with a real variable u > 0 can be scaled to one with u = 1, so fixing u = 1 keeps
    the conjunction's satisfiability (:func:`normalized`). Checked on the terms' syntax, bottom up;
    queries that share terms may share ``memo``.
    """
    known: dict[int, str | None] = {} if memo is None else memo
    return all(_kind(c, known) == _INVARIANT for c in constraints)


def normalized(constraints: Sequence[Any], unit: Any) -> list[Any]:
    """The constraints with the real variable ``unit`` fixed to 1 (sound after :func:`scale_invariant`
    when the constraints also require unit > 0)."""
    return [z3.substitute(c, (unit, z3.RealVal(1))) for c in constraints]


def evaluate_bool(model: Any, term: Any) -> bool:
    return bool(z3.is_true(model.eval(term, model_completion=True)))


def evaluate_number(model: Any, term: Any) -> float:
    value = model.eval(term, model_completion=True)
    if z3.is_int_value(value):
        return float(value.as_long())
    return float(value.as_fraction())


class Z3Ops(PlainWindows):
    """The Z3 back-end of ``Ops``: exact real arithmetic on symbolic terms.

    ``share(total, parts)`` introduces a fresh real u with 0 < u and parts·u <= total (what the
    float back-end guarantees), recorded in ``assumptions``; the same (total, parts) gets the
    same u.
    """

    def __init__(self, *, unit_products: bool = False) -> None:
        self.assumptions: list[Any] = []
        self._shares: dict[tuple[str, int], Any] = {}
        self._unit_products = unit_products
        self.unit: Any = None  # the first share: the one ``normalized`` may fix to 1

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
        if self._unit_products and self._multiple_of_unit(value):
            # (c·u) · count as a product: nonlinear, but linear once u is fixed to 1 by ``normalized``
            return value * z3.ToReal(count) if z3.is_int(count) else value * count
        if at_most is not None and z3.is_expr(count) and not z3.is_int_value(count):
            # value · count for an integer 0 <= count <= at_most, kept linear: count is written in
            # binary with fresh bits b_i (count == Σ b_i 2^i) and the product is Σ b_i · 2^i · value.
            index = len(self.assumptions)
            bits = [z3.Bool(f"bit{index}_{i}") for i in range(max(1, at_most.bit_length()))]
            self.assumptions.append(count == z3.Sum([z3.If(b, 2**i, 0) for i, b in enumerate(bits)]))
            return z3.Sum([z3.If(b, value * (2**i), z3.RealVal(0)) for i, b in enumerate(bits)])
        return value * z3.ToReal(count) if z3.is_int(count) else value * count

    def _multiple_of_unit(self, value: Any) -> bool:
        """Whether ``value`` is a constant times the unit (a number once the unit is 1)."""
        if self.unit is None or not z3.is_expr(value):
            return False
        return bool(z3.is_rational_value(z3.simplify(z3.substitute(value, (self.unit, z3.RealVal(1))))))

    def fraction_down(self, value: Any, numerator: int, denominator: int) -> Any:
        return value * z3.RealVal(numerator) / z3.RealVal(denominator)

    def share(self, total: Any, parts: int) -> Any:
        key = (str(total), parts)
        if key not in self._shares:
            unit = z3.Real(f"share_{parts}_of_{len(self._shares)}")
            self._shares[key] = unit
            if self.unit is None:
                self.unit = unit
            self.assumptions += [unit > 0, unit * parts <= total]
        return self._shares[key]
