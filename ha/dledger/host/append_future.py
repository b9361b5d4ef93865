"""AppendFuture: the answer to one client append, decided once on the host thread.

A `store.waits.once.Once` whose value is the append's result or the error that refused it, with
the part of `concurrent.futures.Future`'s interface that appends use (done, result,
exception, add_done_callback, set_result, set_exception) at a fraction of its cost (see
store/waits/once.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from store.waits.once import Once

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Raised:
    error: BaseException


class AppendFuture(Once[T | _Raised], Generic[T]):
    __slots__ = ()

    def set_result(self, value: T) -> bool:
        """Decide the value; False when already decided (the first decision stands)."""
        return self.set(value)

    def set_exception(self, error: BaseException) -> bool:
        return self.set(_Raised(error))

    def add_done_callback(self, callback: Callable[[AppendFuture[T]], None]) -> None:
        """Call `callback(self)` once decided (at once, on this thread, when already)."""
        self.add_callback(lambda _value: callback(self))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error it was decided with, or None, waiting up to `timeout` seconds
        (TimeoutError past them)."""
        value = self.wait(timeout)
        return value.error if isinstance(value, _Raised) else None

    def result(self, timeout: float | None = None) -> T:
        """The value, waiting up to `timeout` seconds (TimeoutError past them); raises the
        error it was decided with."""
        value = self.wait(timeout)
        if isinstance(value, _Raised):
            raise value.error
        return value
