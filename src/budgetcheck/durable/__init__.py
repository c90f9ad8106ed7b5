"""Durability: the journal (one transaction per charged operation, hash-chained rows), the
transaction hook a ledger kept in a store runs its operations through, and the replay, the stores
(an SQLite file, a PostgreSQL schema), opening a ledger kept in a store, the live publisher, the
audit of a ledger file and the concurrency campaign. Imports the core and ``mechanism``; never
verification, the benchmark or the CLI."""
