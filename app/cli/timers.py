"""`twinlog timers` (the broker's delayed messages: pending per lane, counts, lateness) and
`twinlog message cancel MSG_ID` (a delayed message, before it is due)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from app.cli.client import (
    BrokerClient,
    add_connection_arguments,
    print_json,
    print_result,
    print_table,
    run,
)
from app.cli.times import iso_time


def _when(timestamp_ms: int | None) -> str:
    return "-" if timestamp_ms is None else iso_time(timestamp_ms)


def _timers(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", "/admin/timers")
    if arguments.as_json:
        print_json(answer)
        return 0
    lateness = answer["lateness"]
    dropped = ", ".join(f"{reason} {count}" for reason, count in answer["dropped_totals"].items())
    print(f"scheduler   {'active (master)' if answer['scheduler_active'] else 'not active'}")
    print(f"pending     {answer['pending_total']} ({answer['pending_levels']} on delay levels, "
          f"{answer['pending_timers']} timers); oldest due {_when(answer['oldest_due_ms'])}")
    print(f"delivered   {answer['delivered_total']}; rolled {answer['rolled_total']}; "
          f"dropped: {dropped}; cancels pending {answer['cancels_pending']}")
    print(f"lateness    {lateness['count']} deliveries here; p50 <= "
          f"{lateness['p50_ms_at_most'] if lateness['p50_ms_at_most'] is not None else '-'} ms, "
          f"p99 <= "
          f"{lateness['p99_ms_at_most'] if lateness['p99_ms_at_most'] is not None else '-'} ms, "
          f"max {lateness['max_ms']} ms")
    lanes: list[dict[str, Any]] = [lane for lane in answer["lanes"]
                                   if lane["pending"] or arguments.all]
    if lanes:
        print_table(["LANE", "LEVEL", "WAIT_MS", "PENDING", "NEXT_OFFSET", "OLDEST_DUE"],
                    [[lane["lane"], lane["delay_level"] or "-", lane["wait_ms"], lane["pending"],
                      lane["next_queue_offset"], _when(lane["oldest_due_ms"])]
                     for lane in lanes])
    return 0


def _cancel(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("DELETE", f"/v1/messages/{quote(arguments.msg_id, safe='')}",
                         ok=(200, 202))
    already = " (already cancelled)" if answer["already_cancelled"] else ""
    return print_result(arguments, answer,
                        f"cancelled {answer['msg_id']} to {answer['topic']}, due "
                        f"{iso_time(answer['deliver_at_ms'])}: {answer['status']}{already}")


def add_commands(commands: Any) -> None:
    timers = commands.add_parser("timers", help="delayed messages: pending per lane, counts, "
                                                "lateness")
    timers.add_argument("--all", action="store_true", help="every lane, not only those with "
                                                           "pending messages")
    timers.set_defaults(handler=run(_timers))
    add_connection_arguments(timers)


def add_cancel_command(message_actions: Any) -> None:
    cancel = message_actions.add_parser("cancel", help="cancel a delayed message before it "
                                                       "is due (409 once it is due)")
    cancel.add_argument("msg_id", help="the msg_id its produce answered")
    cancel.set_defaults(handler=run(_cancel))
    add_connection_arguments(cancel)
