"""The benchmark workers' allocator setting."""

from __future__ import annotations

import platform

from budgetcheck.bench.memory import keep_freed_memory


def test_keep_freed_memory_takes_effect_on_glibc() -> None:
    """On glibc both thresholds are accepted (mallopt returns 1); elsewhere it reports False."""
    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")
    assert keep_freed_memory() is keep_freed_memory()  # once per process
