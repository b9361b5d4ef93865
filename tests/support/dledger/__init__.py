"""Harnesses for DLedger tests: in-memory groups, simulated networks, stored logs."""
