"""The mechanism protocols, ``execute`` (a mechanism on a stream through a fresh ledger) and loading
a mechanism by name; imports the ledger and stream layers, never verification."""
