"""Tests of store/waits."""
