"""The DLedger log kept in the broker's store: entries in the commit log, the entry index and
the state files."""
