"""Tests of ha/dledger/stored."""
