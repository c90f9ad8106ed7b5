"""The durable tests' stores: an SQLite file, or a ledger (schema) on one PostgreSQL server per session."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from budgetcheck.durable.postgres import with_ledger


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server for the session (the dev extra's pgserver), as a URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import pgserver

        server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
        url = str(server.get_uri())
    yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger: an SQLite path, or a PostgreSQL URL naming a new ledger (schema)."""
    if request.param == "sqlite":
        return str(tmp_path / "l.db")
    return with_ledger(request.getfixturevalue("pg_server"), f"t_{uuid.uuid4().hex[:16]}")
