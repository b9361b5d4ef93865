"""Tests of app/server."""
