"""Indexes over the commit log: consume queues, the key index, the entry index, time search."""
