"""`twinlog receive`, `twinlog ack` and `twinlog dlq list|redrive`: group consumption from a
shell (docs/http-api.md, "Group consumption").

`receive` prints each received message's body on a line and acks the messages of a receive
once they are written out and flushed (a reader that leaves early, `| head`, leaves the rest
in flight: they come back after their invisible time). `--no-ack` prints `HANDLE BODY` lines
instead, for `twinlog ack`. `dlq redrive` puts each dead letter back into the topic it came
from and commits the group's offset on the dead-letter topic after it, so a redrive that stops
half-way goes on from there.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any
from urllib.parse import quote

from app.cli.client import EXIT_REFUSED, BrokerClient, add_connection_arguments, run

RECEIVE_BATCH_MAX = 32
FOLLOW_WAIT_MS = 20_000
_POP_PROPERTY_PREFIX = "TWINLOG_"


def _messages_path(group: str, topic: str) -> str:
    return f"/v1/groups/{quote(group, safe='')}/topics/{quote(topic, safe='')}/messages"


def _body(message: dict[str, Any]) -> bytes:
    if message["body_encoding"] == "base64":
        return base64.b64decode(message["body"])
    return str(message["body"]).encode()


def _receive(arguments: argparse.Namespace, client: BrokerClient) -> int:
    path = _messages_path(arguments.group, arguments.topic)
    remaining = arguments.max_messages if arguments.max_messages is not None else (
        None if arguments.follow else RECEIVE_BATCH_MAX)
    while remaining is None or remaining > 0:
        request: dict[str, Any] = {
            "max_messages": min(RECEIVE_BATCH_MAX, remaining or RECEIVE_BATCH_MAX),
            "invisible_ms": arguments.invisible_ms,
            "wait_ms": FOLLOW_WAIT_MS if arguments.follow else arguments.wait_ms}
        if arguments.tags:
            request["tags"] = arguments.tags
        answer = client.call("POST", path + ":receive", json=request, ok=(200, 202))
        messages = answer["messages"]
        for message in messages:
            _print(message, arguments)  # raises BrokenPipeError when the reader left
        if messages and not arguments.no_ack:
            client.call("POST", path + ":ack", ok=(200, 202),
                        json={"receipt_handles": [m["receipt_handle"] for m in messages]})
        if remaining is not None:
            remaining -= len(messages)
        if not messages and not arguments.follow:
            break
    return 0


def _print(message: dict[str, Any], arguments: argparse.Namespace) -> None:
    if arguments.as_json:
        sys.stdout.write(json.dumps(message, sort_keys=True) + "\n")
    else:
        prefix = f"{message['receipt_handle']} ".encode() if arguments.no_ack else b""
        sys.stdout.buffer.write(prefix + _body(message) + b"\n")
    sys.stdout.flush()


def _ack(arguments: argparse.Namespace, client: BrokerClient) -> int:
    handles = arguments.handles or [line.split(" ", 1)[0].strip()
                                    for line in sys.stdin if line.strip()]
    refused = 0
    path = _messages_path(arguments.group, arguments.topic) + ":ack"
    for start in range(0, len(handles), 1024):
        response = client.call("POST", path, json={"receipt_handles": handles[start:start + 1024]},
                               ok=(200, 202, 207, 400, 409))
        for result in response["results"]:
            status = result["status"]
            refused += status not in (200, 202)
            if arguments.as_json:
                print(json.dumps(result, sort_keys=True))
            else:
                print(f"{status} {result.get('error_code') or 'ACKED'} "
                      f"{result['receipt_handle'][:24]}…")
    if refused:
        print(f"twinlog: {refused} handles were not acked", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _dlq_messages(client: BrokerClient, group: str, offset: int,
                  max_messages: int) -> dict[str, Any]:
    topic = quote(f"%DLQ%{group}", safe="")
    return client.call("GET", f"/v1/topics/{topic}/queues/0/messages", ok=(200, 404),
                       params={"offset": offset, "max_messages": min(max_messages, 1024)}) \
        or {"messages": [], "next_offset": offset}


def _dlq_list(arguments: argparse.Namespace, client: BrokerClient) -> int:
    offset, remaining = arguments.offset, arguments.max_messages
    while remaining > 0:
        answer = _dlq_messages(client, arguments.group, offset, remaining)
        for message in answer.get("messages", []):
            properties = message["properties"]
            if arguments.as_json:
                print(json.dumps(message, sort_keys=True))
            else:
                sys.stdout.buffer.write(
                    f"{message['queue_offset']} {properties.get('TWINLOG_POP_MSG_ID', '-')} "
                    f"{properties.get('TWINLOG_POP_TOPIC', '-')} attempts "
                    f"{properties.get('TWINLOG_POP_ATTEMPTS', '-')} ".encode()
                    + _body(message) + b"\n")
        remaining -= len(answer.get("messages", []))
        if answer.get("next_offset", offset) == offset:
            break
        offset = answer["next_offset"]
    sys.stdout.flush()
    return 0


def _dlq_redrive(arguments: argparse.Namespace, client: BrokerClient) -> int:
    """Each dead letter back into its topic, then the group's DLQ offset past it."""
    group = arguments.group
    dlq = f"%DLQ%{group}"
    offsets = client.call("GET", f"/v1/groups/{quote(group, safe='')}/offsets",
                          params={"topic": dlq})["offsets"]
    offset = next((item["offset"] for item in offsets if item["queue_id"] == 0), 0)
    moved, remaining = 0, arguments.max_messages
    while remaining > 0:
        answer = _dlq_messages(client, group, offset, remaining)
        messages = answer.get("messages", [])
        for message in messages:
            properties = message["properties"]
            origin = properties.get("TWINLOG_POP_TOPIC")
            if origin is not None:
                entry: dict[str, Any] = {
                    "body": message["body"], "body_encoding": message["body_encoding"],
                    "keys": message["keys"], "properties": {
                        name: value for name, value in properties.items()
                        if not name.startswith(_POP_PROPERTY_PREFIX)}}
                if message["tags"] is not None:
                    entry["tags"] = message["tags"]
                client.call("POST", f"/v1/topics/{quote(origin, safe='')}/messages",
                            json=entry, ok=(201, 202))
                moved += 1
            offset = message["queue_offset"] + 1
            client.call("PUT", f"/v1/groups/{quote(group, safe='')}/offsets/"
                               f"{quote(dlq, safe='')}/queues/0", json={"offset": offset})
        remaining -= len(messages)
        if not messages:
            break
    print(f"redrove {moved} dead letters of {group}; its {dlq} offset is {offset}")
    return 0


def add_commands(commands: Any) -> None:
    receive = commands.add_parser(
        "receive", help="receive a group's messages of a topic, print them and ack them")
    receive.add_argument("group")
    receive.add_argument("topic")
    receive.add_argument("--max-messages", type=int,
                         help="at most this many (default 32; with --follow, no end)")
    receive.add_argument("--invisible-ms", type=int, default=60_000,
                         help="how long a received message is hidden from other receivers")
    receive.add_argument("--wait-ms", type=int, default=0,
                         help="wait this long for a message when none is there")
    receive.add_argument("--tags", help="'TagA || TagB' (default: every message)")
    receive.add_argument("--no-ack", action="store_true",
                         help="print 'HANDLE BODY' lines and ack nothing (see twinlog ack)")
    receive.add_argument("--follow", action="store_true",
                         help="keep receiving (long polls) until interrupted")
    receive.set_defaults(handler=run(_receive))
    ack = commands.add_parser("ack", help="ack received messages by their receipt handles")
    ack.add_argument("group")
    ack.add_argument("topic")
    ack.add_argument("handles", nargs="*",
                     help="receipt handles (default: stdin lines, the first word of each)")
    ack.set_defaults(handler=run(_ack))
    dlq = commands.add_parser("dlq", help="a group's dead letters (%%DLQ%%GROUP)")
    actions = dlq.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="print the dead letters: offset, msg id, topic, "
                                              "attempts, body")
    listing.add_argument("group")
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--max-messages", type=int, default=100)
    listing.set_defaults(handler=run(_dlq_list))
    redrive = actions.add_parser(
        "redrive", help="put the dead letters back into their topics (from the group's offset "
                        "on the dead-letter topic, committed as it goes)")
    redrive.add_argument("group")
    redrive.add_argument("--max-messages", type=int, default=10_000)
    redrive.set_defaults(handler=run(_dlq_redrive))
    for parser in (receive, ack, listing, redrive):
        add_connection_arguments(parser)
