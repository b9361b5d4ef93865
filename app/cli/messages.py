"""`twinlog produce` and `twinlog consume`: messages in and out of a broker for scripts.

`produce` sends each stdin line (or each named file, whole) as one message, in batches, and
prints one line per message: its status and where it was stored. `consume` prints message
bodies, one per line, from a queue (or every read queue of a topic), starting at an offset or
at a group's committed offset, and with `--group` commits the next offset when it is done.
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
    topic_path = f"/v1/topics/{quote(arguments.topic, safe='')}"
    queues = client.call("GET", topic_path)["queues"]
    queue_ids = [q["queue_id"] for q in queues
                 if arguments.queue is None or q["queue_id"] == arguments.queue]
    committed = _group_offsets(client, arguments.group, arguments.topic) \
        if arguments.group else {}
    remaining = arguments.max_messages
    for queue_id in queue_ids:
        offset = committed.get(queue_id, arguments.offset)
        start = offset
        while remaining > 0:
            answer = client.call("GET", f"{topic_path}/queues/{queue_id}/messages",
                                 params={"offset": offset,
                                         "max_messages": min(remaining, 1024)})
            for message in answer["messages"]:
                _print_message(message, arguments.as_json)
            remaining -= len(answer["messages"])
            if answer["next_offset"] == offset:
                break
            offset = answer["next_offset"]
        if arguments.group and offset != start:
            client.call("PUT", f"/v1/groups/{quote(arguments.group, safe='')}/offsets/"
                               f"{quote(arguments.topic, safe='')}/queues/{queue_id}",
                        json={"offset": offset})
    return 0


def _print_message(message: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(message, sort_keys=True))
        return
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
