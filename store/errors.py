"""Conditions that stop a store from starting or serving: never silent, always named."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting (named in the message) has a value the store cannot work with."""


class StoreError(Exception):
    """Base of the store's errors."""


class StoreCorruptError(StoreError):
    """The files on disk cannot be trusted; the message names the file and what is wrong."""


class StoreStateError(StoreError):
    """The store was used in a lifecycle state that does not allow it (start twice, ...)."""


class OffsetNotAvailableError(StoreError):
    """An offset outside what the store holds [min, max)."""
