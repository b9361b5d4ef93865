"""A loopback port that refuses connections, held for as long as a test needs it.

A socket bound to port 0 and never listening: connecting to it is refused at once, and no
other process can bind that port while it is held. Better than a fixed "nothing listens
there" port (1, 2, 9, ...), which some host may well serve.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])
