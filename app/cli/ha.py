"""`twinlog ha status`, `twinlog ha promote` and `twinlog ha demote`: replication seen and
steered through a broker's admin API."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.client import BrokerClient, add_connection_arguments, print_json, print_table, run

_TIMEOUT_S = 30.0


def _call(arguments: argparse.Namespace, path: str, body: dict[str, Any]) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {arguments.token}"} if arguments.token else {}
    try:
        response = httpx.post(arguments.url.rstrip("/") + path, json=body, headers=headers,
                              timeout=_TIMEOUT_S)
    except httpx.HTTPError as error:
        print(f"twinlog ha: {arguments.url}: {error}", file=sys.stderr)
        return 2
    answer = response.json() if response.content else {}
    print(json.dumps(answer, indent=2))
    return 0 if response.status_code == 200 else 1


def _promote(arguments: argparse.Namespace) -> int:
    return _call(arguments, "/admin/ha/promote", {"role": arguments.role,
                                                  "force": arguments.force})


def _demote(arguments: argparse.Namespace) -> int:
    return _call(arguments, "/admin/ha/demote", {
        "master_ha_address": arguments.master_ha_address,
        "master_http_address": arguments.master_http_address})


def _status(arguments: argparse.Namespace, client: BrokerClient) -> int:
    """A table like mqadmin haStatus: the master's offset, then per slave its ack offset,
    diff, transfer rate and whether it is in sync; on a slave, its view of the master."""
    answer = client.call("GET", "/admin/ha")
    if arguments.as_json:
        print_json(answer)
        return 0
    master, slave = answer.get("master"), answer.get("slave")
    if master is not None:
        print(f"{answer['role']} at {master['listen_address']}, epoch {master['epoch']}, "
              f"master offset {master['master_max_offset']}, in sync "
              f"{master['in_sync_slave_count']} of {master['slaves_needed']} needed")
        print_table(["SLAVE", "ADDRESS", "STATE", "ACK_OFFSET", "DIFF_BYTES", "BYTES_PER_S",
                     "IN_SYNC"],
                    [[s["slave_id"], s["address"], s["state"], s["ack_offset"], s["diff_bytes"],
                      s["transfer_bytes_per_s"], s["in_sync"]] for s in master["slaves"]])
    if slave is not None:
        print(f"{answer['role']} of {slave['master_address']}: "
              f"{'connected' if slave['connected'] else 'not connected'}, local offset "
              f"{slave['local_max_offset']}, diff {slave['diff_bytes']} bytes, master epoch "
              f"{slave['master_epoch']}")
        for field in ("refusal", "apply_error", "last_error"):
            if slave.get(field):
                print(f"{field}: {slave[field]}")
    return 0


def add_commands(commands: Any) -> None:
    ha = commands.add_parser(
        "ha", help="replication status; failover by hand: promote a slave, demote a master")
    actions = ha.add_subparsers(dest="ha_command", required=True)
    status = actions.add_parser("status", help="master offset, per slave ack, diff, in sync")
    add_connection_arguments(status)
    status.set_defaults(handler=run(_status))
    promote = actions.add_parser(
        "promote", help="make a slave a master in a new epoch (refused while its master is "
                        "connected, unless --force)")
    promote.add_argument("--role", choices=["SYNC_MASTER", "ASYNC_MASTER"],
                         default="SYNC_MASTER")
    promote.add_argument("--force", action="store_true",
                         help="promote even while the master is connected (it may then go on "
                              "acknowledging writes this broker never gets)")
    promote.set_defaults(handler=_promote)
    demote = actions.add_parser("demote", help="make a master the slave of another broker")
    demote.add_argument("--master-ha-address", required=True, help="host:port")
    demote.add_argument("--master-http-address", required=True, help="http://host:port")
    demote.set_defaults(handler=_demote)
    for parser in (promote, demote):
        parser.add_argument("--url", required=True, help="the broker's HTTP address")
        parser.add_argument("--token", help="an admin bearer token, when tokens are set")
