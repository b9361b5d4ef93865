"""Suite-wide collection order.

`make test` runs the suite on two xdist workers, file by file (`-n 2 --dist loadfile`): a
worker takes the next file when it is done with one. The Spark files hold the longest tests
(a standalone cluster's five JVMs take minutes on two cores); collected first, one worker
starts them while the other goes through the rest, instead of both waiting on them at the end.
The order within a file is kept.
"""

from __future__ import annotations

import pytest

_FIRST = "tests/jobs/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(_FIRST))
