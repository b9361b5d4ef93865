"""An ASGI app served by a real uvicorn server on loopback, in a thread of this process.

The test binds the listening socket itself (port 0) and hands it to uvicorn, so the port is
held from the moment it is chosen: no other process can take it before the server serves.
Start and stop each wait with their own deadline.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@contextmanager
def serving_over_tcp(app: FastAPI) -> Iterator[str]:
    """Serve `app` (its lifespan included); yields its base URL, http://127.0.0.1:<port>."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]},
                              name="uvicorn-test", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            assert thread.is_alive(), "the server exited while starting"
            assert time.monotonic() < deadline, f"not serving within {START_TIMEOUT_S} s"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        listener.close()
        assert not thread.is_alive(), f"the server did not stop within {STOP_TIMEOUT_S} s"
