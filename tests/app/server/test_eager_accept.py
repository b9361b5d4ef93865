"""Connections waiting to be accepted are all accepted in one event-loop turn
(app/server/eager_accept.py), on uvloop, whose libuv accepts one per turn."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import uvloop

from app.server.eager_accept import EagerAccept

CLIENTS = 40
TURNS_MAX = 400


class Counted(asyncio.Protocol):
    made: list[asyncio.BaseTransport]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(transport)


@contextmanager
def waiting_clients(listener: socket.socket) -> Iterator[None]:
    """CLIENTS connections the kernel completed, in the listener's accept queue."""
    with ExitStack() as stack:
        for _ in range(CLIENTS):
            client = stack.enter_context(socket.create_connection(listener.getsockname()))
            client.setblocking(False)
        yield


def turns_to_accept_all(eager: bool) -> int:
    """Loop turns until a uvloop server on `listener` (with EagerAccept when `eager`) has
    made every waiting connection; a callback that re-schedules itself counts the turns."""
    made: list[asyncio.BaseTransport] = []
    protocol = type("Protocol", (Counted,), {"made": made})

    async def run(listener: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol, sock=listener)
        accept = EagerAccept(listener, protocol, None) if eager else None
        turns = 0
        done = loop.create_future()

        def turn() -> None:
            nonlocal turns
            turns += 1
            if len(made) == CLIENTS or turns == TURNS_MAX:
                done.set_result(turns)
            else:
                loop.call_soon(turn)

        with waiting_clients(listener):
            if accept is not None:
                accept.start(loop)
            loop.call_soon(turn)
            await done
            for transport in made:
                transport.close()
        if accept is not None:
            accept.stop()
        server.close()
        await server.wait_closed()
        return turns

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(listener))


def test_every_waiting_connection_is_accepted_at_once() -> None:
    """40 connections in the accept queue are made within a few loop turns with EagerAccept
    (without it, test_uvloop_alone_accepts_one_connection_per_turn)."""
    turns = turns_to_accept_all(eager=True)
    assert turns <= 5, f"{turns} turns to accept {CLIENTS} connections"


def test_uvloop_alone_accepts_one_connection_per_turn() -> None:
    """Why EagerAccept exists: uvloop's own server takes about one turn per waiting
    connection (if this fails, uvloop accepts eagerly itself and EagerAccept can go)."""
    turns = turns_to_accept_all(eager=False)
    assert turns >= CLIENTS // 2, f"{turns} turns to accept {CLIENTS} connections"


def test_a_stopped_acceptor_accepts_nothing_more() -> None:
    """After stop() the duplicate descriptor is closed and no reader is left on the loop."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        accept = EagerAccept(listener, asyncio.Protocol, None)
        accept.start(loop)
        duplicate = accept._socket.fileno()
        accept.stop()
        assert accept._socket.fileno() == -1
        assert not loop.remove_reader(duplicate)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())
    listener.close()


class _OutOfDescriptors:
    """The acceptor's socket with accept() failing as a process out of descriptors does."""

    def __init__(self, real: socket.socket) -> None:
        self.real = real
        self.accept_calls = 0

    def fileno(self) -> int:
        return self.real.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        self.accept_calls += 1
        raise OSError(errno.EMFILE, "Too many open files")

    def close(self) -> None:
        self.real.close()


def test_out_of_descriptors_pauses_accepting_instead_of_spinning() -> None:
    """While accept() fails with EMFILE (the listener stays readable), the acceptor tries once
    per pause, not once per loop turn; after the pause it watches the listener again."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        accept = EagerAccept(listener, asyncio.Protocol, None, error_pause_s=3600.0)
        failing = _OutOfDescriptors(accept._socket)
        accept._socket = failing  # type: ignore[assignment]
        accept.start(loop)
        for _ in range(50):  # fifty loop turns with a connection waiting
            await asyncio.sleep(0)
        during_pause = failing.accept_calls
        assert accept._paused is not None
        accept._paused.cancel()
        accept._resume()  # the pause ends (its timer, run by hand)
        for _ in range(50):
            await asyncio.sleep(0)
        after_pause = failing.accept_calls
        accept.stop()
        return during_pause, after_pause

    with (socket.create_connection(listener.getsockname()),
          asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner):
        during_pause, after_pause = runner.run(run())
    listener.close()
    assert during_pause == 1, f"accept() tried {during_pause} times in 50 turns of one pause"
    assert after_pause == 2, f"accept() tried {after_pause - 1} times after the pause ended"
