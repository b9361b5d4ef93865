"""Group consumption (POP): the pure decisions of receive, ack, invisibility and retries.

Nothing here reads a clock, opens a socket or starts a thread: the time is an argument, and
each decision is an event that the caller records in the log and applies in log order
(docs/group-consumption.md).
"""
