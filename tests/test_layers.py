"""The layer rules of pyproject.toml's [tool.importlinter] hold, and each kind of breach fails.

`make contracts` runs lint-imports on the tree; here the same contracts run on a copy of the
packages with one forbidden import written into it, so a contract that stopped matching
anything (a renamed package, a typo in a module name) fails this test instead of passing quietly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.processes  # runs lint-imports
PACKAGES = ("app", "ha", "store", "jobs")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)


def test_the_tree_keeps_every_contract() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("store/topic.py", "import app.settings", "store imports nothing of ha or app"),
    ("ha/epochs.py", "import app.settings", "store imports nothing of ha or app"),
    ("ha/dledger/core/quorum.py", "import threading", "the DLedger node core is pure"),
    ("ha/classic/core/link.py", "import time", "the classic replication core is pure"),
    ("ha/classic/core/master.py", "import ha.connection",
     "the classic replication core is pure"),
    ("app/cli/ha.py", "import store.paths", "the admin commands talk to a broker over HTTP"),
    ("app/broker/snapshots.py", "import app.api.routes.topics", "import no route module"),
    ("app/api/gateway.py", "import store.record", "app knows nothing of frames or record bytes"),
    ("jobs/__init__.py", "import store.paths", "the Spark job reads snapshot files only"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, module: str, line: str,
                                                contract: str) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "static", "*.js", "*.css"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout
    broken = [row for row in done.stdout.splitlines() if row.endswith("BROKEN")]
    assert len(broken) >= 1 and any(contract in row for row in broken), done.stdout
