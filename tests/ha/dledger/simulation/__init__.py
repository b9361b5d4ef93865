"""Tests of ha/dledger/simulation."""
