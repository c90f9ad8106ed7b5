"""Built-in w-event mechanisms, written against budgetcheck's public API only."""

from __future__ import annotations

from collections.abc import Callable

from budgetcheck import StreamMechanism
from mechanisms.ba import BA as BA
from mechanisms.bd import BD as BD
from mechanisms.hybrid import Hybrid as Hybrid
from mechanisms.sample import Sample as Sample
from mechanisms.uniform import Uniform as Uniform

BUILTIN: dict[str, Callable[[], StreamMechanism]] = {
    "Uniform": Uniform,
    "Sample": Sample,
    "BD": BD,
    "BA": BA,
    "Hybrid": Hybrid,
}

__all__ = ["BA", "BD", "BUILTIN", "Hybrid", "Sample", "Uniform"]
