"""`twinlog ha status`, `twinlog ha promote` and `twinlog ha demote`: replication seen and
steered through a broker's admin API.

`ha status` prints a table like mqadmin haStatus: in classic mode the master's offset and a row
per slave, or a slave's view of its master; in DLedger mode the member's role, term and leader
and a row per peer. It exits 5 (after the table, with one line on stderr saying why) when
replication is not healthy: a SYNC_MASTER with fewer in-sync slaves than it needs, a slave not
streaming from its master, a DLedger member that knows no leader, or a leader without a quorum
of peers in sync.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.client import (
    EXIT_UNHEALTHY,
    BrokerClient,
    add_connection_arguments,
    print_json,
    print_result,
    print_table,
    require_url,
    run,
)


def _status(arguments: argparse.Namespace, client: BrokerClient) -> int:
    answer = client.call("GET", "/admin/ha")
    if arguments.as_json:
        print_json(answer)
    elif answer.get("dledger") is not None:
        _print_dledger(answer["dledger"])
    else:
        _print_classic(answer)
    problems = unhealthy(answer)
    if problems:
        sys.stdout.flush()  # the table first, then why it is not healthy
        print(f"twinlog: replication is not healthy: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_UNHEALTHY
    return 0


def unhealthy(answer: dict[str, Any]) -> list[str]:
    """Why replication is not healthy, from a `/admin/ha` answer (empty: healthy)."""
    dledger, master, slave = answer.get("dledger"), answer.get("master"), answer.get("slave")
    if dledger is not None:
        return _dledger_problems(dledger)
    problems = []
    if master is not None and answer["role"] == "SYNC_MASTER" \
            and master["in_sync_slave_count"] < master["slaves_needed"]:
        problems.append(f"{master['in_sync_slave_count']} slaves in sync, "
                        f"{master['slaves_needed']} needed (puts answer 202 SLAVE_NOT_AVAILABLE)")
    if slave is not None:
        if not slave["connected"]:
            problems.append(f"not connected to the master {slave['master_address']}")
        for field in ("refusal", "apply_error"):
            if slave.get(field):
                problems.append(f"{field}: {slave[field]}")
    return problems


def _dledger_problems(view: dict[str, Any]) -> list[str]:
    if view["leader_id"] is None:
        return [f"{view['role']} {view['self_id']} knows no leader in term {view['term']}"]
    if view["role"] != "LEADER":
        return []
    in_sync, needed = _in_sync_peers(view), _peers_needed(view)
    if in_sync < needed:
        return [f"the leader has {in_sync} peers in sync, a quorum needs {needed}"]
    return []


def _in_sync_peers(view: dict[str, Any]) -> int:
    return sum(1 for peer in view["peers"] if _peer_in_sync(view, peer))


def _peer_in_sync(view: dict[str, Any], peer: dict[str, Any]) -> bool:
    """A peer holds every committed entry (what the dashboard and `/admin/diff` count)."""
    return peer["match_index"] is not None and peer["match_index"] >= view["committed_index"]


def _peers_needed(view: dict[str, Any]) -> int:
    """Peers besides the leader that a quorum of the group needs."""
    return (len(view["peers"]) + 1) // 2


def _print_classic(answer: dict[str, Any]) -> None:
    """The master's offset, then per slave its ack offset, diff, transfer rate and whether it
    is in sync; on a slave, its view of the master."""
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


def _print_dledger(view: dict[str, Any]) -> None:
    """The member's role, term and leader, its log's committed and end index, then per peer
    what the member knows of it: on the leader its match index, lag and dispatcher state;
    on a follower only the last contact (the leader alone tracks replication)."""
    leads = view["role"] == "LEADER"
    if leads:
        leader = f"in sync {_in_sync_peers(view)} of {_peers_needed(view)} needed"
    elif view["leader_id"] is not None:
        leader = f"leader {view['leader_id']} ({view['leader_http_address'] or 'address unknown'})"
    else:
        leader = "no leader known"
    print(f"{view['role']} {view['self_id']} of group {view['group']}, term {view['term']}, "
          f"{leader}, committed index {view['committed_index']}, end index "
          f"{view['end_index']}")
    print_table(["PEER", "DLEDGER_ADDRESS", "HTTP_ADDRESS", "STATE", "MATCH_INDEX",
                 "LAG_ENTRIES", "LAG_BYTES", "CONTACT_MS_AGO", "IN_SYNC"],
                [[f"{p['peer_id']} (leader)" if p["peer_id"] == view["leader_id"]
                  else p["peer_id"], p["dledger_address"], p["http_address"],
                  p["dispatcher_state"], p["match_index"], p["lag_entries"], p["lag_bytes"],
                  p["last_contact_ms_ago"], _peer_in_sync(view, p) if leads else None]
                 for p in view["peers"]])
    if view.get("last_error"):
        print(f"last_error: {view['last_error']}")


def _promote(arguments: argparse.Namespace, client: BrokerClient) -> int:
    require_url(arguments, "ha promote needs --url: the broker whose role changes")
    answer = client.call("POST", "/admin/ha/promote",
                         json={"role": arguments.role, "force": arguments.force})
    return print_result(arguments, answer, f"promoted {client.url}: now {answer['role']} in "
                                           f"epoch {answer['epoch']}")


def _demote(arguments: argparse.Namespace, client: BrokerClient) -> int:
    require_url(arguments, "ha demote needs --url: the broker whose role changes")
    answer = client.call("POST", "/admin/ha/demote", json={
        "master_ha_address": arguments.master_ha_address,
        "master_http_address": arguments.master_http_address})
    return print_result(arguments, answer, f"demoted {client.url}: now {answer['role']} of "
                                           f"{arguments.master_ha_address}")


def add_commands(commands: Any) -> None:
    ha = commands.add_parser(
        "ha", help="replication status; failover by hand: promote a slave, demote a master")
    actions = ha.add_subparsers(dest="ha_command", required=True)
    status = actions.add_parser(
        "status", help="classic: master offset, per slave ack, diff, in sync; DLedger: role, "
                       "term, leader, per peer lag (exit 5: not healthy)")
    status.set_defaults(handler=run(_status))
    promote = actions.add_parser(
        "promote", help="make a slave a master in a new epoch (refused while its master is "
                        "connected, unless --force); needs --url")
    promote.add_argument("--role", choices=["SYNC_MASTER", "ASYNC_MASTER"],
                         default="SYNC_MASTER")
    promote.add_argument("--force", action="store_true",
                         help="promote even while the master is connected (it may then go on "
                              "acknowledging writes this broker never gets)")
    promote.set_defaults(handler=run(_promote))
    demote = actions.add_parser("demote", help="make a master the slave of another broker; "
                                               "needs --url")
    demote.add_argument("--master-ha-address", required=True, help="host:port")
    demote.add_argument("--master-http-address", required=True, help="http://host:port")
    demote.set_defaults(handler=run(_demote))
    for parser in (status, promote, demote):
        add_connection_arguments(parser)
