"""The seeded simulation of a DLedger group and the invariants it checks after every event."""
