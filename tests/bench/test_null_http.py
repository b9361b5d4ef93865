"""bench/null_http.py, the group bench's null receive-and-ack server, on loopback in this
process: answers in twinlog's shape, COUNT messages in all then empty answers (a drained
topic), every handle acked back, and a clear 400 for a malformed body."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bench.lean_http import LeanHttp
from bench.null_http import serve

pytestmark = pytest.mark.anyio
PATH = "/v1/groups/n/topics/Pop/messages"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_it_hands_out_its_count_then_nothing_and_acks_every_handle() -> None:
    port = _port()
    server = asyncio.ensure_future(serve(port, 40, 30.0))
    try:
        for _ in range(200):  # until it listens (bounded)
            try:
                _, probe = await asyncio.open_connection("127.0.0.1", port)
                probe.close()
                break
            except OSError:
                await asyncio.sleep(0.01)
        async with LeanHttp(f"http://127.0.0.1:{port}", timeout_s=10.0) as client:
            first = (await client.post(PATH + ":receive", json={"max_messages": 32})).json()
            rest = (await client.post(PATH + ":receive", json={"max_messages": 32})).json()
            empty = (await client.post(PATH + ":receive", json={"max_messages": 32})).json()
            assert [len(answer["messages"]) for answer in (first, rest, empty)] == [32, 8, 0]
            message = first["messages"][0]
            assert {"msg_id", "body", "receipt_handle", "delivery_attempt",
                    "invisible_until_ms"} <= message.keys()
            handles = [item["receipt_handle"] for item in first["messages"]]
            acked = (await client.post(PATH + ":ack", json={"receipt_handles": handles}))
            assert acked.status_code == 200
            assert [item["receipt_handle"] for item in acked.json()["results"]] == handles
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {PATH}:ack HTTP/1.1\r\nhost: x\r\ncontent-length: 9\r\n\r\n"
                     "{not json".encode())
        status_line = await asyncio.wait_for(reader.readline(), 10.0)
        writer.close()
        assert status_line.startswith(b"HTTP/1.1 400 ")
    finally:
        server.cancel()
