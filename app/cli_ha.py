"""`twinlog ha promote` and `twinlog ha demote`: failover by hand through a broker's admin API."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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


def add_commands(commands: Any) -> None:
    ha = commands.add_parser("ha", help="failover by hand: promote a slave, demote a master")
    actions = ha.add_subparsers(dest="ha_command", required=True)
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
