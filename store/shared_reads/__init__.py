"""Reads of a store from another process: the table of readable ends the store's process
publishes (ends_table.py, publisher.py) and a read-only view of the files (read_view.py)."""
