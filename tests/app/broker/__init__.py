"""Tests of app/broker."""
