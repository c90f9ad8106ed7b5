"""the secret and the streams a mechanism sees; imports the ledger layer only"""
