"""Connections waiting to be accepted are all accepted in one event-loop turn (app/eager_accept.py),
on uvloop, whose libuv accepts one per turn."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import uvloop

from app.eager_accept import EagerAccept

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
