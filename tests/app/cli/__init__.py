"""Tests of app/cli."""
