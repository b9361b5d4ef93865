"""Delayed and timed messages: held back in the log, put into their topic when due.

A delayed message is first stored in a lane: a queue of a schedule topic whose entries all
wait the same time, so each lane is in due order and is read from its head (names.py,
lanes.py). Delay levels have a lane each (`TWINLOG_SYS_SCHEDULE`, queue level - 1, RocketMQ's
SCHEDULE_TOPIC_XXXX); any other delivery time goes through the timer lanes
(`TWINLOG_SYS_TIMER`), whose waits double from `timer_precision_ms`: a message waits in the
longest lane that does not pass its due time, then rolls (a small record naming the original)
into shorter ones until it is due.

The master's scheduler (scheduler.py) is the only writer of what a lane's head becomes: the
message in its real topic, a roll, or a drop (cancelled, topic gone). Each such record names
the lane entry it consumes (`TWINLOG_TIMER_FROM`), so the write and its progress are one
record: every replica derives the same progress by dispatching its log (state.py), and a
promoted slave continues exactly where the records it holds say, with nothing to copy.
"""
