"""The DLedger node as a pure state machine, its messages and its rules: no socket, thread or
clock."""
