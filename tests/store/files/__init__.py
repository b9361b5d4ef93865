"""Tests of store/files."""
