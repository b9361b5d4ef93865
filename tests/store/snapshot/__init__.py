"""Tests of store/snapshot."""
