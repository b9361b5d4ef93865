"""Tests of store/index."""
