"""`twinlog topic ...` and `twinlog group ...`: topics, groups and consumer offsets over HTTP,
in the spirit of mqadmin's topicList, updateTopic, topicStatus and consumerProgress."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from app.cli.client import (
    EXIT_USAGE,
    BrokerClient,
    CliError,
    add_connection_arguments,
    print_json,
    print_result,
    print_table,
    run,
)
from app.cli.times import timestamp_ms

_PERMISSION_NAMES = {6: "rw", 4: "r", 2: "w", 0: "-"}
BROKER_BACKOFF = "default"


def _path(*parts: str | int) -> str:
    return "/" + "/".join(quote(str(part), safe="") for part in parts)


def _topic_list(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", "/v1/topics")
    if arguments.as_json:
        print_json(answer)
        return 0
    print_table(["TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"],
                [[t["name"], t["read_queue_count"], t["write_queue_count"],
                  _PERMISSION_NAMES.get(t["permission"], str(t["permission"]))]
                 for t in answer["topics"]])
    return 0


def _topic_create(arguments: argparse.Namespace, client: BrokerClient) -> int:
    body: dict[str, Any] = {"name": arguments.topic,
                            "read_queue_count": arguments.read_queues or arguments.queues,
                            "write_queue_count": arguments.write_queues or arguments.queues}
    answer = client.call("POST", "/v1/topics", json=body, ok=(200, 201))
    return print_result(arguments, answer, f"created {answer['name']}: "
                                           f"{answer['read_queue_count']} read / "
                                           f"{answer['write_queue_count']} write queues")


def _topic_describe(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", _path("v1", "topics", arguments.topic))
    if arguments.as_json:
        print_json(answer)
        return 0
    print(f"{answer['name']}: {answer['read_queue_count']} read / "
          f"{answer['write_queue_count']} write queues, "
          f"{_PERMISSION_NAMES.get(answer['permission'], answer['permission'])}")
    print_table(["QUEUE", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES"],
                [[q["queue_id"], q["min_offset"], q["max_offset"], q["message_count"]]
                 for q in answer["queues"]])
    return 0


def _topic_update(arguments: argparse.Namespace, client: BrokerClient) -> int:
    body = {name: value for name, value in (("read_queue_count", arguments.read_queues),
                                            ("write_queue_count", arguments.write_queues),
                                            ("permission", arguments.permission))
            if value is not None}
    if not body:
        raise CliError(EXIT_USAGE, "nothing to update: give --read-queues, --write-queues or "
                                   "--perm")
    answer = client.call("PATCH", _path("v1", "topics", arguments.topic), json=body)
    permission = _PERMISSION_NAMES.get(answer["permission"], answer["permission"])
    return print_result(arguments, answer, f"updated {answer['name']}: "
                                           f"{answer['read_queue_count']} read / "
                                           f"{answer['write_queue_count']} write queues, "
                                           f"{permission}")


def _topic_delete(arguments: argparse.Namespace, client: BrokerClient) -> int:
    client.call("DELETE", _path("v1", "topics", arguments.topic), ok=(204,))
    print(f"deleted {arguments.topic}")
    return 0


def _group_delete(arguments: argparse.Namespace, client: BrokerClient) -> int:
    client.call("DELETE", _path("v1", "groups", arguments.group), ok=(204,))
    print(f"deleted {arguments.group}")
    return 0


def _group_list(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", "/v1/groups")
    if arguments.as_json:
        print_json(answer)
        return 0
    print_table(["GROUP", "CONSUME", "BROADCAST", "RETRY_QUEUES", "RETRY_MAX", "BACKOFF",
                 "FIFO"],
                [[g["name"], g["consume_enabled"], g["broadcast_enabled"],
                  g["retry_queue_count"], g["retry_times_max"], _backoff_text(g["backoff"]),
                  g["fifo"]]
                 for g in answer["groups"]])
    return 0


def _group_create(arguments: argparse.Namespace, client: BrokerClient) -> int:
    body: dict[str, Any] = {"name": arguments.group, **_group_fields(arguments)}
    answer = client.call("POST", "/v1/groups", json=body, ok=(200, 201))
    return print_result(arguments, answer, f"created {answer['name']}: "
                                           f"{_group_policy_text(answer)}")


def _group_update(arguments: argparse.Namespace, client: BrokerClient) -> int:
    body = _group_fields(arguments)
    if not body:
        raise CliError(EXIT_USAGE, "nothing to update: give --retry-max, --backoff, --fifo or "
                                   "--no-fifo")
    answer = client.call("PATCH", _path("v1", "groups", arguments.group), json=body)
    return print_result(arguments, answer, f"updated {answer['name']}: "
                                           f"{_group_policy_text(answer)}")


def _group_fields(arguments: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if arguments.retry_max is not None:
        body["retry_times_max"] = arguments.retry_max
    if arguments.backoff is not None:
        body["backoff"] = _backoff_of(arguments.backoff)
    if arguments.fifo is not None:
        body["fifo"] = arguments.fifo
    return body


def _backoff_of(text: str) -> dict[str, Any] | None:
    """--backoff: "table", "exponential:INITIAL_MS[:MULTIPLIER[:MAX_MS]]" (the API's
    backoff object), or "default" (the broker's pop_backoff: null)."""
    if text == BROKER_BACKOFF:
        return None
    if text == "table":
        return {"policy": "table"}
    kind, *values = text.split(":")
    if kind != "exponential" or not 1 <= len(values) <= 3:
        raise CliError(EXIT_USAGE, f"--backoff {text!r}: give table, "
                                   "exponential:INITIAL_MS[:MULTIPLIER[:MAX_MS]] or default")
    try:
        backoff: dict[str, Any] = {"policy": "exponential", "initial_ms": int(values[0])}
        if len(values) > 1:
            backoff["multiplier"] = float(values[1])
        if len(values) > 2:
            backoff["max_ms"] = int(values[2])
    except ValueError:
        raise CliError(EXIT_USAGE, f"--backoff {text!r}: INITIAL_MS and MAX_MS are whole "
                                   "milliseconds, MULTIPLIER a number") from None
    return backoff


def _backoff_text(backoff: dict[str, Any] | None) -> str:
    if backoff is None:
        return BROKER_BACKOFF
    if backoff["policy"] == "table":
        return "table"
    return f"exponential:{backoff['initial_ms']}:{backoff['multiplier']:g}:{backoff['max_ms']}"


def _group_policy_text(group: dict[str, Any]) -> str:
    return (f"{'FIFO, ' if group['fifo'] else ''}at most {group['retry_times_max']} retries, "
            f"backoff {_backoff_text(group['backoff'])}")


def _group_describe(arguments: argparse.Namespace, client: BrokerClient) -> int:
    group = client.call("GET", _path("v1", "groups", arguments.group))
    offsets = client.call("GET", _path("v1", "groups", arguments.group, "offsets"))
    if arguments.as_json:
        print_json({"group": group, "offsets": offsets["offsets"]})
        return 0
    print(f"{group['name']}: consume {'on' if group['consume_enabled'] else 'off'}, "
          f"{group['retry_queue_count']} retry queues, {_group_policy_text(group)}")
    print_table(["TOPIC", "QUEUE", "OFFSET"],
                [[o["topic"], o["queue_id"], o["offset"]] for o in offsets["offsets"]])
    return 0


def _group_lag(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", _path("v1", "groups", arguments.group, "lag"))
    if arguments.as_json:
        print_json(answer)
        return 0
    print_table(["TOPIC", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG"],
                [[q["topic"], q["queue_id"], q["broker_offset"], q["consumer_offset"], q["lag"]]
                 for q in answer["queues"]])
    print(f"total lag {answer['total_lag']}, max {answer['max_lag']}")
    return 0


def _group_reset(arguments: argparse.Namespace, client: BrokerClient) -> int:
    """Set the group's offset on each queue of a topic (or one queue): to a given offset, or
    to the queue's first or next offset. Going backwards is allowed: that is what a reset is."""
    if arguments.timestamp is not None:
        return _group_reset_to_time(arguments, client)
    topic = client.call("GET", _path("v1", "topics", arguments.topic))
    queues = [q for q in topic["queues"]
              if arguments.queue is None or q["queue_id"] == arguments.queue]
    if not queues:
        raise CliError(4, f"{arguments.topic} has no queue {arguments.queue}")
    done = []
    for queue in queues:
        offset = (queue["min_offset"] if arguments.earliest else
                  queue["max_offset"] if arguments.latest else arguments.offset)
        client.call("PUT", _path("v1", "groups", arguments.group, "offsets", arguments.topic,
                                 "queues", queue["queue_id"]),
                    json={"offset": offset, "allow_backwards": True}, ok=(200, 201, 204))
        done.append({"topic": arguments.topic, "queue_id": queue["queue_id"], "offset": offset})
    if arguments.as_json:
        print_json({"group": arguments.group, "offsets": done})
    else:
        print_table(["TOPIC", "QUEUE", "OFFSET"],
                    [[d["topic"], d["queue_id"], d["offset"]] for d in done])
    return 0


def _group_reset_to_time(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("POST", _path("v1", "groups", arguments.group, "offsets",
                                       arguments.topic) + ":reset",
                         json={"timestamp_ms": arguments.timestamp,
                               "queue_id": arguments.queue})
    if arguments.as_json:
        print_json({"group": arguments.group, "offsets": answer["offsets"]})
    else:
        print_table(["TOPIC", "QUEUE", "OFFSET"],
                    [[o["topic"], o["queue_id"], o["offset"]] for o in answer["offsets"]])
    return 0


def add_commands(commands: Any) -> None:
    topic = commands.add_parser("topic", help="list, create, describe, update and delete topics")
    topic_actions = topic.add_subparsers(dest="topic_command", required=True)
    listing = topic_actions.add_parser("list", help="every topic with its queues")
    listing.set_defaults(handler=run(_topic_list))
    create = topic_actions.add_parser("create", help="create a topic (409 if it exists)")
    create.add_argument("topic")
    create.add_argument("--queues", type=int, default=4, help="read and write queues")
    create.add_argument("--read-queues", type=int)
    create.add_argument("--write-queues", type=int)
    create.set_defaults(handler=run(_topic_create))
    describe = topic_actions.add_parser("describe", help="a topic and its queues' offsets")
    describe.add_argument("topic")
    describe.set_defaults(handler=run(_topic_describe))
    update = topic_actions.add_parser("update", help="grow queue counts, change permission")
    update.add_argument("topic")
    update.add_argument("--read-queues", type=int, help="new read queue count (only up)")
    update.add_argument("--write-queues", type=int, help="new write queue count (only up)")
    update.add_argument("--perm", dest="permission", type=int, choices=(0, 2, 4, 6),
                        help="6 rw, 4 r, 2 w, 0 none")
    update.set_defaults(handler=run(_topic_update))
    delete = topic_actions.add_parser("delete", help="delete a topic, its queues and offsets")
    delete.add_argument("topic")
    delete.set_defaults(handler=run(_topic_delete))

    group = commands.add_parser("group", help="list, create, update, describe, delete groups; "
                                                  "lag; reset")
    group_actions = group.add_subparsers(dest="group_command", required=True)
    group_listing = group_actions.add_parser("list", help="every subscription group")
    group_listing.set_defaults(handler=run(_group_list))
    group_create = group_actions.add_parser("create", help="create a subscription group")
    group_create.add_argument("group")
    group_update = group_actions.add_parser("update", help="change a group's retry policy")
    group_update.add_argument("group")
    for parser in (group_create, group_update):
        parser.add_argument("--retry-max", type=int, help="retries before the dead letters")
        parser.add_argument("--backoff", help=(
            "wait of a released message: table (10s 30s 1m 2m ... 2h), "
            "exponential:INITIAL_MS[:MULTIPLIER[:MAX_MS]] (multiplier 2, max 2 h unless "
            "given), or default (the broker's pop_backoff)"))
        parser.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None,
                            help=("a FIFO group: each queue delivered in order, one message at "
                                  "a time (--no-fifo: in parallel, the default)"))
    group_create.set_defaults(handler=run(_group_create))
    group_update.set_defaults(handler=run(_group_update))
    group_describe = group_actions.add_parser("describe", help="a group and its offsets")
    group_describe.add_argument("group")
    group_describe.set_defaults(handler=run(_group_describe))
    group_delete = group_actions.add_parser("delete", help="delete a group and its offsets")
    group_delete.add_argument("group")
    group_delete.set_defaults(handler=run(_group_delete))
    lag = group_actions.add_parser("lag", help="per queue: broker offset, consumer offset, lag")
    lag.add_argument("group")
    lag.set_defaults(handler=run(_group_lag))
    reset = group_actions.add_parser("reset", help="move a group's offsets on a topic")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--queue", type=int, help="one queue (default: every queue)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--offset", type=int)
    target.add_argument("--earliest", action="store_true", help="each queue's first offset")
    target.add_argument("--latest", action="store_true", help="each queue's next offset")
    target.add_argument("--timestamp", type=timestamp_ms,
                        help="each queue's first message stored at or after this time "
                             "(epoch ms or ISO 8601, UTC unless it says)")
    reset.set_defaults(handler=run(_group_reset))
    for parser in (listing, create, describe, update, delete, group_listing, group_create,
                   group_update, group_describe, group_delete, lag, reset):
        add_connection_arguments(parser)
