"""Tests of ha/dledger/host."""
