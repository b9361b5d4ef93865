"""`twinlog message get|find`: a message by id (mqadmin queryMsgById) or by key
(queryMsgByKey), printed as a table of its fields, or its JSON with --json."""

from __future__ import annotations

import argparse
import base64
import datetime
from typing import Any
from urllib.parse import quote

from app.cli.client import BrokerClient, add_connection_arguments, print_json, print_table, run

_BODY_PREVIEW_CHARS = 60


def _message_get(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", f"/v1/messages/{quote(arguments.msg_id, safe='')}",
                         params={"body_encoding": "utf8"})
    if arguments.as_json:
        print_json(answer)
        return 0
    for name, value in _fields(answer):
        print(f"{name:<20} {value}")
    print(f"{'body':<20} {_body_text(answer)}")
    return 0


def _fields(message: dict[str, Any]) -> list[tuple[str, str]]:
    """A message's fields as a person reads them: "-" for none, keys space-separated as
    produce takes them, properties as k=v, times in ISO 8601 UTC with the milliseconds."""
    properties = message["properties"]
    return [
        ("msg_id", message["msg_id"]), ("topic", message["topic"]),
        ("queue_id", str(message["queue_id"])), ("queue_offset", str(message["queue_offset"])),
        ("commit_log_offset", str(message["commit_log_offset"])),
        ("size_bytes", str(message["size_bytes"])), ("tags", message["tags"] or "-"),
        ("keys", " ".join(message["keys"]) or "-"),
        ("properties", ", ".join(f"{k}={v}" for k, v in sorted(properties.items())) or "-"),
        ("idempotency_key", message.get("idempotency_key") or "-"),
        ("born_time", iso_time(message["born_timestamp_ms"])),
        ("store_time", iso_time(message["store_timestamp_ms"])),
        ("reconsume_times", str(message["reconsume_times"])),
    ]


def iso_time(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond: 2026-01-02T03:04:05.678Z."""
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _message_find(arguments: argparse.Namespace, client: BrokerClient) -> int:
    params: dict[str, Any] = {"key": arguments.key, "max_messages": arguments.max_messages,
                              "body_encoding": "utf8"}
    if arguments.begin_ms is not None:
        params["begin_timestamp_ms"] = arguments.begin_ms
    if arguments.end_ms is not None:
        params["end_timestamp_ms"] = arguments.end_ms
    answer = client.call("GET", f"/v1/topics/{quote(arguments.topic, safe='')}/messages",
                         params=params)
    if arguments.as_json:
        print_json(answer)
        return 0
    print_table(["MSG_ID", "QUEUE", "OFFSET", "STORE_TIME", "BODY"],
                [[m["msg_id"], m["queue_id"], m["queue_offset"], iso_time(m["store_timestamp_ms"]),
                  _body_text(m)[:_BODY_PREVIEW_CHARS]] for m in answer["messages"]])
    return 0


def _body_text(message: dict[str, Any]) -> str:
    if message["body_encoding"] == "utf8":
        return str(message["body"])
    return f"(base64, {len(base64.b64decode(message['body']))} bytes) {message['body']}"


def add_commands(commands: Any) -> None:
    message = commands.add_parser("message", help="look a message up by id or by key")
    actions = message.add_subparsers(dest="message_command", required=True)
    get = actions.add_parser("get", help="the message a msg_id names")
    get.add_argument("msg_id")
    get.set_defaults(handler=run(_message_get))
    find = actions.add_parser("find", help="a topic's messages with a key, newest first")
    find.add_argument("--topic", required=True)
    find.add_argument("--key", required=True)
    find.add_argument("--max-messages", type=int, default=32, help="at most this many")
    find.add_argument("--begin-ms", type=int, help="stored at or after (epoch ms)")
    find.add_argument("--end-ms", type=int, help="stored before (epoch ms)")
    find.set_defaults(handler=run(_message_find))
    for parser in (get, find):
        add_connection_arguments(parser)
