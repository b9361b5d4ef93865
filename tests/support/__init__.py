"""Helpers shared by tests: fixtures for external programs (a PostgreSQL server)."""
