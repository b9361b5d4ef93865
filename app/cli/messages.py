"""`twinlog produce` and `twinlog consume`: messages in and out of a broker for scripts.

`produce` sends each stdin line (or each named file, whole) as one message, in batches, and
prints one line per message: its status and where it was stored. `consume` prints message
bodies, one per line, from a queue (or every read queue of a topic), starting at an offset or
at a group's committed offset, and with `--group` commits, per queue, the offset after the last
message it wrote out and flushed: a reader that closes the pipe early (`| head`) leaves the
rest uncommitted.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from app.cli.client import EXIT_REFUSED, BrokerClient, add_connection_arguments, run

BATCH_MESSAGES_MAX = 100
_STORED = (201, 202)  # 202: stored with a guarantee missing (the status says which)


def _bodies(arguments: argparse.Namespace) -> Iterator[dict[str, Any]]:
    if arguments.files:
        for name in arguments.files:
            data = Path(name).read_bytes()
            yield {"body": base64.b64encode(data).decode(), "body_encoding": "base64"}
        return
    for line in sys.stdin.buffer:
        yield {"body": base64.b64encode(line.rstrip(b"\r\n")).decode(),
               "body_encoding": "base64"}


def _batches(arguments: argparse.Namespace) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for entry in _bodies(arguments):
        if arguments.key:
            entry["keys"] = [arguments.key]
        if arguments.tag:
            entry["tags"] = arguments.tag
        batch.append(entry)
        if len(batch) == BATCH_MESSAGES_MAX:
            yield batch
            batch = []
    if batch:
        yield batch


def _produce(arguments: argparse.Namespace, client: BrokerClient) -> int:
    path = f"/v1/topics/{quote(arguments.topic, safe='')}/messages:batch"
    refused = 0
    for batch in _batches(arguments):
        answer = client.call("POST", path, json={"messages": batch}, ok=(201, 202, 207))
        for result in answer["results"]:
            if result["http_status"] not in _STORED:
                refused += 1
            if arguments.as_json:
                print(json.dumps(result, sort_keys=True))
            else:
                print(f"{result['status']} {result.get('msg_id') or '-'} "
                      f"queue {result.get('queue_id')} offset {result.get('queue_offset')}")
    if refused:
        print(f"twinlog: {refused} messages were refused", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _group_offsets(client: BrokerClient, group: str, topic: str) -> dict[int, int]:
    # A group that never committed has no offsets (committing creates it when allowed).
    answer = client.call("GET", f"/v1/groups/{quote(group, safe='')}/offsets",
                         params={"topic": topic})
    return {o["queue_id"]: o["offset"] for o in answer["offsets"] if o["topic"] == topic}


def _consume(arguments: argparse.Namespace, client: BrokerClient) -> int:
    """Print the queues' messages; with --group, commit on each queue the offset after the
    last message written out and flushed, also when the reader goes away mid-way (a closed
    pipe ends the command in app/cli/main.py, after these commits)."""
    topic_path = f"/v1/topics/{quote(arguments.topic, safe='')}"
    queues = client.call("GET", topic_path)["queues"]
    queue_ids = [q["queue_id"] for q in queues
                 if arguments.queue is None or q["queue_id"] == arguments.queue]
    committed = _group_offsets(client, arguments.group, arguments.topic) \
        if arguments.group else {}
    remaining = arguments.max_messages
    for queue_id in queue_ids:
        start = committed.get(queue_id, arguments.offset)
        written = _Written(start)
        try:
            remaining = _print_queue(client, f"{topic_path}/queues/{queue_id}/messages",
                                     written, remaining, arguments.as_json)
        finally:
            if arguments.group and written.offset != start:
                client.call("PUT", f"/v1/groups/{quote(arguments.group, safe='')}/offsets/"
                                   f"{quote(arguments.topic, safe='')}/queues/{queue_id}",
                            json={"offset": written.offset})
    return 0


class _Written:
    """The queue offset after the last message of a queue written out and flushed."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def _print_queue(client: BrokerClient, path: str, written: _Written, remaining: int,
                 as_json: bool) -> int:
    """Print a queue's messages from `written.offset`, at most `remaining`; moves
    `written.offset` past each message once it is flushed, and past a page's end once the
    whole page is (the end may skip offsets with no message). Returns what remains."""
    while remaining > 0:
        offset = written.offset
        answer = client.call("GET", path, params={"offset": offset,
                                                  "max_messages": min(remaining, 1024)})
        for message in answer["messages"]:
            _print_message(message, as_json)  # raises BrokenPipeError when the reader left
            written.offset = message["queue_offset"] + 1
        remaining -= len(answer["messages"])
        if answer["next_offset"] == offset:
            break
        written.offset = answer["next_offset"]
    return remaining


def _print_message(message: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(message, sort_keys=True) + "\n")
    else:
        body = base64.b64decode(message["body"]) if message["body_encoding"] == "base64" \
            else message["body"].encode()
        sys.stdout.buffer.write(body + b"\n")
    sys.stdout.flush()


def add_commands(commands: Any) -> None:
    produce = commands.add_parser(
        "produce", help="send stdin lines (or whole files) as messages, one result line each")
    produce.add_argument("topic")
    produce.add_argument("files", nargs="*", help="each file is one message (default: stdin "
                                                  "lines)")
    produce.add_argument("--key", help="a key on every message")
    produce.add_argument("--tag", help="a tag on every message")
    produce.set_defaults(handler=run(_produce))
    consume = commands.add_parser(
        "consume", help="print message bodies, one per line, from a topic's queues")
    consume.add_argument("topic")
    consume.add_argument("--queue", type=int, help="one queue (default: every read queue)")
    consume.add_argument("--offset", type=int, default=0,
                         help="where to start in each queue (a group's commit wins)")
    consume.add_argument("--group", help="start at this group's offsets and commit after")
    consume.add_argument("--max-messages", type=int, default=100, help="at most this many")
    consume.set_defaults(handler=run(_consume))
    for parser in (produce, consume):
        add_connection_arguments(parser)
