"""Answers written straight to ASGI `send`, for callables that bypass FastAPI (produce, the
body guard)."""

from __future__ import annotations

from starlette.types import Scope, Send

from app.api.errors import ApiError, render


async def send_answer(send: Send, http_status: int, body: bytes,
                      headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": http_status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_problem(send: Send, scope: Scope, error: ApiError) -> None:
    problem = render(error, scope.get("path"))
    await send_answer(send, problem.http_status, problem.body, problem.headers)
