"""Tests of ha/dledger/core."""
