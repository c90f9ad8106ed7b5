"""A ledger kept in PostgreSQL, shared by publishers on several hosts (``pip install 'budgetcheck[postgres]'``).

``postgresql://user@host:port/db?ledger=name`` names the ledger: its tables live in the schema
``name`` (default ``budgetcheck``), so one database holds any number of ledgers. The tables, the
bytes and the hash chain are those of an SQLite ledger file; the triggers are PL/pgSQL: the head is
kept by an AFTER INSERT trigger in the same transaction, and UPDATE, DELETE and TRUNCATE of records
are refused. The write lock is the head row (``SELECT … FOR UPDATE`` in a READ COMMITTED
transaction: every statement after it sees every commit before it); ``load`` and the audit read one
REPEATABLE READ READ ONLY snapshot. ``lock_timeout`` is PostgreSQL's (then LedgerBusy);
``durability="process"`` is ``synchronous_commit = off`` (a killed client loses nothing committed;
a server crash may lose the last commits), except for a commit asked to be durable (a publisher's
release: ``SET LOCAL synchronous_commit = on``, whose WAL flush covers every earlier commit). A new ledger is made in one transaction under an advisory
lock, so hosts creating the same ledger at once make it once. psycopg is imported only here.
"""

from __future__ import annotations

import re
import urllib.parse
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

from budgetcheck.ledger.errors import InvalidArgument, LedgerBusy, LedgerCorrupt, LedgerUnavailable

if TYPE_CHECKING:
    from psycopg import Connection

DEFAULT_LEDGER: Final = "budgetcheck"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# PostgreSQL reserves the pg_ prefix for system schemas and keeps the SQL standard's catalog views in
# information_schema: a ledger there would fail as "damaged" or put its tables among the catalog's
_RESERVED = re.compile(r"pg_.*|information_schema")
# a password in a URL urllib cannot split: user:password@ after the scheme, or a password= parameter
# A password may hold '/', '?' or '#' (the driver reads up to the last '@'), so the user information is cut
# out of the text as written, up to the last '@', never through urllib (which ends the authority at them).
_USERINFO = re.compile(r"^([^:/?#]+://[^:@]*):.*@", re.DOTALL)
_PASSWORD_PARAM = re.compile(r"([?&][^=&#]*password=)[^&#]*", re.IGNORECASE)  # password=, sslpassword=, …
# the options libpq reads as integers (a port may be a comma-separated list, one per host)
_INTEGER_OPTIONS: Final = (
    "port",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)

_SCHEMA = """
CREATE TABLE {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE {s}.records (
    seq BIGINT PRIMARY KEY,
    version BIGINT NOT NULL,
    kind BIGINT NOT NULL,
    op BIGINT NOT NULL,
    t BIGINT NOT NULL,
    amounts BYTEA NOT NULL,
    detail TEXT NOT NULL,
    output BYTEA,
    hash BYTEA NOT NULL
);
CREATE UNIQUE INDEX published_once ON {s}.records (t) WHERE kind = 1;
CREATE UNIQUE INDEX operation_once ON {s}.records (((detail::json) ->> 'operation')) WHERE kind = 0;
CREATE TABLE {s}.head (id BIGINT PRIMARY KEY CHECK (id = 1), count BIGINT NOT NULL, hash BYTEA NOT NULL);
CREATE FUNCTION {s}.records_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE {s}.head SET count = NEW.seq, hash = NEW.hash WHERE id = 1; RETURN NEW; END $$;
CREATE FUNCTION {s}.records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'ledger records are append-only'; END $$;
CREATE TRIGGER records_head AFTER INSERT ON {s}.records FOR EACH ROW EXECUTE FUNCTION {s}.records_head();
CREATE TRIGGER records_no_update BEFORE UPDATE OR DELETE ON {s}.records FOR EACH ROW EXECUTE FUNCTION {s}.records_append_only();
CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON {s}.records FOR EACH STATEMENT EXECUTE FUNCTION {s}.records_append_only()
"""


def split_url(url: str) -> tuple[str, str, str]:
    """(connection URL for the driver, ledger name, the URL as messages show it: no password).

    The driver's URL is ``url`` without its ``ledger=`` parameter and otherwise as written (never decoded
    and encoded again: ``%20`` stays ``%20``, where a re-encoding would make it ``+``, which libpq reads
    literally). A URL the driver cannot read (an unknown parameter, a bad percent escape, a port that is
    not a number) is InvalidArgument here, before any connection is tried."""
    problem = None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket: the driver would not read it either
        problem = str(exc)
    if problem is not None:  # raised outside the except block: no driver or parser error on the chain
        raise InvalidArgument(f"ledger URL {redact(url)!r} is not a valid URL: {scrub(problem, url)}")
    rest, names = _without_ledger(parts.query)
    if len(names) > 1:
        raise InvalidArgument(f"ledger URL {redact(url)!r} names the ledger {len(names)} times")
    name = names[0] if names else DEFAULT_LEDGER
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"ledger={name!r} in {redact(url)!r} must be 1 to 63 lower-case letters, digits or '_', "
            "not starting with a digit (it names the ledger's schema)"
        )
    if _RESERVED.fullmatch(name):
        raise InvalidArgument(
            f"ledger={name!r} in {redact(url)!r} is a PostgreSQL system schema (pg_* and "
            "information_schema are reserved); name the ledger otherwise"
        )
    return urllib.parse.urlunsplit(parts._replace(query=rest)), name, redact(url)


def _without_ledger(query: str) -> tuple[str, list[str]]:
    """(the query without its ``ledger=`` parameters, every other parameter as written; the ledger names)."""
    kept, names = [], []
    for item in query.split("&"):
        if not item:  # '?&a=1', 'a=1&&b=2': nothing to keep
            continue
        key, _, value = item.partition("=")
        if urllib.parse.unquote_plus(key) == "ledger":
            names.append(urllib.parse.unquote_plus(value))
        else:
            kept.append(item)
    return "&".join(kept), names


def check_conninfo(conninfo: str, url: str) -> None:
    """InvalidArgument (exit 2) when the driver cannot read the connection URL ``conninfo`` (made from
    ``url``): an unknown parameter, a bad percent escape, a port or another integer option that is not a
    number. libpq would otherwise report some of these only when connecting, as an unreachable server."""
    from psycopg.conninfo import conninfo_to_dict

    problem = None
    try:
        options = conninfo_to_dict(conninfo)
    except _driver().Error as exc:
        problem = _first_line(exc)
    if problem is not None:  # raised outside the except block: the driver's error (and the password it may
        # quote) is not kept on the exception's __context__
        raise InvalidArgument(f"ledger URL {redact(url)!r} cannot be read: {scrub(problem, url)}")
    for key in _INTEGER_OPTIONS:
        for item in str(options.get(key, "")).split(","):
            if item and not (item.isascii() and item.isdigit() and (key != "port" or 0 < int(item) < 65536)):
                raise InvalidArgument(
                    f"{key}={_shown_option(item, url)!r} in the ledger URL {redact(url)!r} must be "
                    f"{'a port number from 1 to 65535' if key == 'port' else 'a whole number of seconds or a count'}"
                )


def with_ledger(url: str, name: str) -> str:
    """``url`` naming the ledger ``name`` (replacing any ``ledger=`` it has; the other parameters as written)."""
    parts = urllib.parse.urlsplit(url)
    rest, _ = _without_ledger(parts.query)
    query = "&".join(filter(None, (rest, urllib.parse.urlencode([("ledger", name)]))))
    return urllib.parse.urlunsplit(parts._replace(query=query))


def redact(url: str) -> str:
    """``url`` without its passwords: the user information's (up to the last '@', as the driver reads it) and
    every ``…password=`` parameter's (``password``, libpq's ``sslpassword``)."""
    return _PASSWORD_PARAM.sub(r"\1***", _USERINFO.sub(r"\1:***@", url))


def scrub(message: str, url: str) -> str:
    """``message`` (e.g. the driver's) without the passwords of ``url``, as written or percent-decoded:
    the driver may quote the part of the URL it could not read."""
    for secret in sorted(_secrets(url), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


def _secrets(url: str) -> set[str]:
    """The passwords of ``url`` (user information and ``…password=`` parameters), as written and decoded."""
    secrets: set[str] = set()
    userinfo = _USERINFO.match(url)
    if userinfo is not None:
        secrets.add(url[userinfo.end(1) + 1 : userinfo.end() - 1])
    secrets.update(match.group(0)[len(match.group(1)) :] for match in _PASSWORD_PARAM.finditer(url))
    for secret in [*secrets]:
        secrets.add(urllib.parse.unquote(secret))
        secrets.add(urllib.parse.unquote_plus(secret))
    return set(filter(None, secrets))


def _shown_option(item: str, url: str) -> str:
    """An option's value for an error message: ``***`` when it is any part of a password (a driver that ends
    the user information at '#' reads the rest of a password as the host and port)."""
    return "***" if any(item in secret for secret in _secrets(url)) else scrub(item, url)


def _driver() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise LedgerUnavailable(
            f"a postgresql:// ledger needs the PostgreSQL driver: pip install 'budgetcheck[postgres]' ({exc})"
        ) from None
    return psycopg


@final
class PostgresStore:
    """One autocommit connection to a ledger's schema (see the module docstring)."""

    __slots__ = ("_db", "_errors", "_name", "_schema", "_synced", "_timeout")

    def __init__(
        self,
        url: str,
        *,
        durability: str = "full",
        lock_timeout: float = 60.0,
        create: tuple[list[tuple[str, str]], bytes] | None = None,
    ) -> None:
        driver = _driver()
        conninfo, self._schema, self._name = split_url(url)
        check_conninfo(conninfo, url)
        self._timeout = lock_timeout
        self._synced = durability == "full"  # synchronous_commit = on
        self._errors = driver.errors
        problem = None
        try:
            self._db: Connection[Any] = driver.connect(
                conninfo, autocommit=True, connect_timeout=max(1, int(lock_timeout))
            )
        except driver.Error as exc:
            problem = scrub(_first_line(exc), url)
        if problem is not None:  # raised outside the except block: the driver's error (which may quote the
            # password) is neither the __cause__ nor the suppressed __context__ of ours
            raise LedgerUnavailable(f"cannot connect to the ledger {self._name}: {problem}")
        try:
            with self.guard("set up the connection"):
                self._db.execute(f"SET lock_timeout = {max(1, round(lock_timeout * 1000))}")
                self._db.execute(f"SET synchronous_commit = {'on' if durability == 'full' else 'off'}")
                self._db.execute(f'SET search_path = "{self._schema}"')
                if create is not None:
                    self._create(*create)
                elif not self._exists():
                    raise LedgerCorrupt(
                        f"{self._name}: the database holds no budgetcheck ledger named {self._schema!r}"
                    )
        except BaseException:
            self._db.close()
            raise

    def _exists(self) -> bool:
        # a query of the catalog (in this statement's snapshot), not to_regclass (whose catalog cache may miss a table
        # another host committed while this one waited for the advisory lock)
        found = self._db.execute(
            "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'meta'", (self._schema,)
        ).fetchone()
        return found is not None

    def _create(self, meta: list[tuple[str, str]], start: bytes) -> None:
        """Make the ledger's schema whole in one transaction, under an advisory lock (one maker at a time)."""
        if self._exists():
            return
        key = zlib.crc32(f"budgetcheck ledger {self._schema}".encode()) - 2**31
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            if self._exists():  # another host made it while we waited: theirs is the ledger
                return
            self._db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            for statement in _SCHEMA.split(";\n"):
                self._db.execute(statement.format(s=f'"{self._schema}"'))
            for name, value in meta:
                self._db.execute("INSERT INTO meta VALUES (%s, %s)", (name, value))
            self._db.execute("INSERT INTO head VALUES (1, 0, %s)", (start,))

    @property
    def name(self) -> str:
        return self._name

    @property
    def operation_key(self) -> str:
        return "((detail::json) ->> 'operation')"

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._db.execute(_placeholders(sql), params)

    def begin_write(self) -> None:
        self._db.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        self._db.execute("SELECT count FROM head WHERE id = 1 FOR UPDATE")

    def begin_read(self) -> None:
        self._db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def commit(self, *, durable: bool = False) -> None:
        if durable and not self._synced:  # this commit waits for its WAL flush, which covers every earlier one
            self._db.execute("SET LOCAL synchronous_commit = on")
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        try:
            if self.in_transaction():
                self._db.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 — a lost connection has nothing left to undo
            return

    def in_transaction(self) -> bool:
        status = self._db.info.transaction_status
        return bool(status.name in ("INTRANS", "INERROR", "ACTIVE"))

    def guard(self, what: str) -> _Guard:
        return _Guard(self, what)

    def duplicate(self, exc: BaseException | None) -> bool:
        return isinstance(exc, self._errors.UniqueViolation)

    def close(self) -> None:
        self._db.close()

    @property
    def closed(self) -> bool:
        return bool(self._db.closed)

    def interpose(self, wrap: Callable[[Any], Any]) -> None:
        self._db = wrap(self._db)


def _placeholders(sql: str, _cache: dict[str, str] = {}) -> str:  # noqa: B006 — a cache on purpose
    """The journal's ``?`` placeholders as psycopg's ``%s`` (the journal's SQL has no other ``?`` or ``%``)."""
    converted = _cache.get(sql)
    if converted is None:
        converted = _cache[sql] = sql.replace("%", "%%").replace("?", "%s")
    return converted


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@final
class _Guard:
    """PostgreSQL errors as LedgerBusy (lock timeout), LedgerUnavailable (connection lost) or LedgerCorrupt."""

    __slots__ = ("_store", "_what")

    def __init__(self, store: PostgresStore, what: str) -> None:
        self._store, self._what = store, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        errors = self._store._errors
        name = self._store.name
        if isinstance(exc, errors.LockNotAvailable):
            raise LedgerBusy(
                f"{name}: cannot {self._what}: another writer held the ledger's lock for more than "
                f"lock_timeout={self._store._timeout} s; nothing was charged, try again"
            ) from exc
        if isinstance(exc, errors.OperationalError) and self._store._db.closed:
            raise LedgerUnavailable(
                f"{name}: cannot {self._what}: the connection was lost: {_first_line(exc)}"
            ) from exc
        if isinstance(exc, errors.Error):
            raise LedgerCorrupt(f"{name}: cannot {self._what}: {_first_line(exc)}") from exc
