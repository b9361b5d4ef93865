"""Helpers shared by tests: child processes, a TCP proxy, a PostgreSQL server."""
