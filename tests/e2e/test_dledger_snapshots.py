"""DLedger mode writes metadata snapshots through the group (3 real `twinlog serve` members):
a member wiped and reset to its leader's base past retention takes its tables from the
snapshot in its log, with no bootstrap pull."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_dledger_state import QUIET, RETAINED, _tables, wipe_a_follower_past_retention
from tests.support.dledger_group import DLedgerGroup, Member, wait_for
from tests.support.ports import refused_port
from tests.support.queue_reads import produce, queue

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def _committed_index(member: Member) -> int:
    """The member's committed index; -1 while it does not answer yet."""
    try:
        return int(member.dledger()["committed_index"])
    except httpx.HTTPError:
        return -1


def test_a_wiped_member_takes_the_tables_from_the_log_snapshot_without_the_pull(
        tmp_path: Path) -> None:
    """Topic Kept and group G's offset 1 are records of the first commit-log file. A follower
    is stopped and wiped; 200 KB more go in and retention reaches the first files on the
    leader: it writes a snapshot through the group and removes them (its base moves). The
    wiped member is started with HTTP peers that refuse every connection (its bootstrap pull
    never reaches the leader): reset to the leader's base, it holds the leader's tables from
    the snapshot in its log, and applies the records after it; elected, it continues a
    queue whose records all lie below its base at the leader's next offset there."""
    group = DLedgerGroup(tmp_path, default_queue_count=1, **QUIET, **RETAINED)
    try:
        leader, fresh = wipe_a_follower_past_retention(group)
        with ExitStack() as ports:
            group.settings["dledger_http_peers"] = ";".join(
                f"{node_id}-127.0.0.1:{ports.enter_context(refused_port())}"
                for node_id in group.members)
            group.launch(fresh.node_id)
            wait_for(lambda: _committed_index(fresh) == leader.dledger()["end_index"], 30,
                     "the wiped member caught up")
            assert fresh.dledger()["base_index"] > 0  # reset to a base of its leader
            wait_for(lambda: _tables(fresh) == _tables(leader), 15,
                     f"equal tables (the wiped member's {_tables(fresh)}, the leader's "
                     f"{_tables(leader)})")
            assert queue(fresh, "Fill") == queue(leader, "Fill")
            again = leader.client.put("/v1/groups/G/offsets/Kept/queues/0",
                                      json={"offset": 2})
            assert again.status_code == 200, again.text
            wait_for(lambda: _tables(fresh) == _tables(leader), 15,
                     "the wiped member applies the records after the snapshot")
            # Kept/0's three messages all lie below the base: the wiped member started that
            # queue at the leader's next offset there (the snapshot's queue start), so
            # elected it continues the queue instead of starting it again at 0.
            moved = leader.client.post("/admin/dledger/transfer-leadership",
                                       json={"target_id": fresh.node_id})
            assert moved.status_code == 200, moved.text
            wait_for(lambda: group.leader() is fresh, 20, "the wiped member leads")
            assert produce(fresh, "Kept", "after", queue_id=0)["queue_offset"] == 3
    finally:
        group.stop_all()
