"""Tests of app/api."""
