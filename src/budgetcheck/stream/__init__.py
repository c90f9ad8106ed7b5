"""The secret and the streams a mechanism sees (guarded, personalized, live), their neighbouring
relation, and the parsing of publisher rows. Part of the core with :mod:`budgetcheck.ledger`:
imports only the core."""
