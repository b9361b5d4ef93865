"""One store-backed DLedger member in its own process, for bench/dledger.py: the follower
side of the SYNC_MASTER comparison (the classic bench runs its slave in a process too).

    python bench/dledger_member.py DATA_DIR SELF_ID PEERS LISTENER_FD [--secret S]
        [--election-timeout-ms N]

The listener is bound by the parent and inherited (pass_fds). Prints READY once started and
stops cleanly at the end of stdin.

With TWINLOG_BENCH_PROFILE_DIR set, every service thread of the member (the host, which also
does the peer I/O, and the store's threads: consume-queue dispatch, flush) runs under its own
cProfile timed by `time.thread_time` (the CPU of that thread, not the wall clock: a loaded
machine does not inflate it), written at stop to DIR/SELF_ID-THREAD.pstats.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ha.dledger.core.peers import parse_peers  # noqa: E402
from ha.dledger.host.host_config import HostConfig  # noqa: E402
from ha.dledger.host.server import DLedgerServer  # noqa: E402
from ha.dledger.host.transport_config import TransportConfig  # noqa: E402
from ha.dledger.stored.stored_storage import StoredDLedgerStorage  # noqa: E402
from store import Message, StoreConfig  # noqa: E402
from store.service import ServiceThread  # noqa: E402

FILE_SIZE_BYTES = 256 << 20


@dataclass(frozen=True)
class StoredMember:
    server: DLedgerServer
    storage: StoredDLedgerStorage

    def encoder(self, message: Message) -> Callable[[], bytes]:
        """What the broker hands `host.append`: the record encoded on this member's log
        (run on the host thread, so at the log's end at that moment)."""

        def encode() -> bytes:
            encoded = self.storage.log.encode(message)
            assert isinstance(encoded, bytes), encoded
            return encoded

        return encode


def stored_member(data_dir: Path, self_id: str, peers_text: str, listener: socket.socket,
                  secret: bytes | None, host_config: HostConfig) -> StoredMember:
    peers = parse_peers(peers_text)
    storage = StoredDLedgerStorage(StoreConfig(data_dir=data_dir,
                                               mapped_file_size_bytes=FILE_SIZE_BYTES))
    transport = TransportConfig("bench", self_id, peers, secret,
                                allow_unauthenticated=secret is None)
    server = DLedgerServer(transport, host_config, storage, listener, random.Random(self_id))
    return StoredMember(server, storage)


def spawn_member(data_dir: Path, self_id: str, peers_text: str, listener: socket.socket,
                 secret: str | None, election_timeout_ms: int | None = None,
                 page_cache_acks: bool = False) -> subprocess.Popen[str]:
    """A member process on `listener` (inherited, then closed here), once it says READY."""
    command = [sys.executable, str(Path(__file__)), str(data_dir), self_id, peers_text,
               str(listener.fileno())]
    if secret is not None:
        command += ["--secret", secret]
    if election_timeout_ms is not None:
        command += ["--election-timeout-ms", str(election_timeout_ms)]
    if page_cache_acks:
        command.append("--page-cache-acks")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, pass_fds=(listener.fileno(),),
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    listener.close()
    assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    return child


def stop_member(child: subprocess.Popen[str]) -> None:
    """End of stdin: the member stops cleanly; killed after 30 s."""
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def profile_service_threads(directory: Path, self_id: str) -> None:
    """Run each ServiceThread's loop under its own CPU-time cProfile, saved as it ends."""
    loop = ServiceThread._loop

    def profiled_loop(service: ServiceThread) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        try:
            loop(service)
        finally:
            profiler.disable()
            profiler.dump_stats(directory / f"{self_id}-{service.name}.pstats")

    ServiceThread._loop = profiled_loop  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("self_id")
    parser.add_argument("peers")
    parser.add_argument("listener_fd", type=int)
    parser.add_argument("--secret")
    parser.add_argument("--election-timeout-ms", type=int,
                        default=HostConfig().election_timeout_ms)
    parser.add_argument("--page-cache-acks", action="store_true",
                        help="sync_before_ack=False (a broker with ASYNC_FLUSH)")
    arguments = parser.parse_args()
    profile_dir = os.environ.get("TWINLOG_BENCH_PROFILE_DIR")
    if profile_dir:
        profile_service_threads(Path(profile_dir), arguments.self_id)
    listener = socket.socket(fileno=arguments.listener_fd)
    secret = arguments.secret.encode() if arguments.secret else None
    host_config = HostConfig(election_timeout_ms=arguments.election_timeout_ms,
                             sync_before_ack=not arguments.page_cache_acks)
    server = stored_member(arguments.data_dir, arguments.self_id, arguments.peers, listener,
                           secret, host_config).server
    server.start()
    print("READY", flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
