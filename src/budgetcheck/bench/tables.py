"""Tables of the papers' form, written twice: CSV (every value at full precision, for a program) and
Markdown (rounded, for a reader)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

Value = str | int | float | None


def _cell(value: Value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value.is_integer() and abs(value) < 1e12:
            return f"{int(value):,}"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:,.4g}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def markdown(header: Sequence[str], rows: Sequence[Sequence[Value]]) -> str:
    """A GitHub Markdown table; numbers right-aligned, floats to four significant digits."""
    numeric = [
        all(isinstance(r[k], int | float) and not isinstance(r[k], bool) for r in rows) for k in range(len(header))
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_table(
    path: Path, header: Sequence[str], rows: Sequence[Sequence[Value]], *, title: str, notes: Sequence[str] = ()
) -> list[Path]:
    """``path``.csv and ``path``.md (a title, the table, then ``notes`` as a list)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = path.with_suffix(".csv")
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(["" if v is None else repr(v) if isinstance(v, float) else v for v in row] for row in rows)
    text = f"## {title}\n\n{markdown(header, rows)}\n"
    if notes:
        text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    md = path.with_suffix(".md")
    md.write_text(text)
    return [table, md]
