"""The durable layer: ledger files and stores, the publisher, the file audit; imports the ledger and stream layers, never verification."""
