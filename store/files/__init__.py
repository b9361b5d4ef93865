"""Mapped files and their allocation: the file primitives every log of the store is made of."""
