"""A data dir keeps the commit-log file size it was created with: restarted under another
`mapped_file_size_bytes` (a smaller development default, say), it starts, reads everything,
and rolls new files at its own size; a size the settings cannot use is refused by name. The
size is recorded in the data dir (`commitlog_file_size`); a data dir from before the record
is read from its files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store import Message, MessageStore, PutMessageStatus
from store.errors import ConfigError
from tests.support.child_lines import ChildLines
from tests.support.store import small_config, wait_dispatched

pytestmark = pytest.mark.processes  # a store killed in a child process

ROOT = Path(__file__).resolve().parents[2]

CREATED_BYTES = 64 * 1024
BODY_BYTES = 3000


def _fill(store: MessageStore, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        _, done = store.put_message(Message("Sizes", b"%05d" % index * (BODY_BYTES // 5),
                                            queue_id=0))
        assert done.result(5) is PutMessageStatus.PUT_OK
    wait_dispatched(store)


def _bodies(store: MessageStore) -> list[bytes]:
    result = store.get_messages("Sizes", 0, 0, 1000)
    return [message.body for message in result.messages]


def _created(data_dir: Path, count: int, *, crash: bool, recorded: bool = True) -> None:
    """A store on 64 KiB files holding `count` messages over several files, stopped cleanly,
    or killed (SIGKILL: the abort marker stays, recovery scans) once they are acknowledged."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from store import MessageStore\n"
        "from tests.support.store import small_config\n"
        "from tests.store.test_file_size_change import CREATED_BYTES, _fill\n"
        "store = MessageStore(small_config(Path(sys.argv[1]),\n"
        "                                  mapped_file_size_bytes=CREATED_BYTES))\n"
        "store.start()\n"
        "_fill(store, int(sys.argv[2]))\n"
        "assert len(store.commit_log.files.files) >= 3\n"
        "if sys.argv[3] == 'crash':\n"
        "    print('FILLED', flush=True)\n"
        "    time.sleep(60)\n"
        "store.shutdown()\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(data_dir), str(count),
                              "crash" if crash else "clean"], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.PIPE, text=True)
    try:
        if crash:
            assert ChildLines(child).next() == "FILLED"
            child.send_signal(signal.SIGKILL)
        assert child.wait(60) in (0, -signal.SIGKILL)
    finally:
        child.kill()
        child.wait(10)
    assert (data_dir / "abort").exists() == crash
    assert (data_dir / "commitlog_file_size").read_text() == f"{CREATED_BYTES}\n"
    if not recorded:  # as a store before the record left it
        (data_dir / "commitlog_file_size").unlink()


@pytest.mark.parametrize("setting_bytes", [1 << 20, 48 * 1024])
@pytest.mark.parametrize(("crash", "recorded"), [(False, True), (True, True), (False, False)],
                         ids=["clean", "crash", "clean-unrecorded"])
def test_a_data_dir_keeps_its_file_size(tmp_path: Path, setting_bytes: int, crash: bool,
                                        recorded: bool) -> None:
    """Created on 64 KiB files, restarted with a larger or a smaller setting (after a clean
    stop or a crash; with the size recorded, or only its files to tell): it starts (before,
    it was refused as corrupt), keeps 64 KiB, reads every message, and the files it adds are
    64 KiB too, so the offsets stay those of one log."""
    data_dir = tmp_path / "data"
    _created(data_dir, 60, crash=crash, recorded=recorded)
    store = MessageStore(small_config(data_dir, mapped_file_size_bytes=setting_bytes,
                                      message_size_max_bytes=4096))
    store.start()
    try:
        assert store.config.mapped_file_size_bytes == CREATED_BYTES
        assert [b[:5] for b in _bodies(store)] == [b"%05d" % i for i in range(60)]
        _fill(store, 60, start=60)
        assert [b[:5] for b in _bodies(store)] == [b"%05d" % i for i in range(120)]
        files = store.commit_log.files.files
        assert {f.size_bytes for f in files} == {CREATED_BYTES}
        assert [f.start_offset for f in files] == [
            files[0].start_offset + n * CREATED_BYTES for n in range(len(files))]
        assert {p.stat().st_size for p in (data_dir / "commitlog").iterdir()} == {CREATED_BYTES}
    finally:
        store.shutdown()


def test_a_single_file_keeps_its_recorded_size(tmp_path: Path) -> None:
    """One 64 KiB file, restarted under 1 MiB: the record says 64 KiB (without it a single
    short file reads as a torn tail of the setting's size, and was stretched to 1 MiB)."""
    data_dir = tmp_path / "data"
    store = MessageStore(small_config(data_dir, mapped_file_size_bytes=CREATED_BYTES))
    store.start()
    _fill(store, 5)
    store.shutdown()
    store = MessageStore(small_config(data_dir, mapped_file_size_bytes=1 << 20))
    store.start()
    try:
        assert store.config.mapped_file_size_bytes == CREATED_BYTES
        assert [f.size_bytes for f in store.commit_log.files.files] == [CREATED_BYTES]
        assert len(_bodies(store)) == 5
    finally:
        store.shutdown()


def test_a_size_the_settings_cannot_use_is_refused_by_name(tmp_path: Path) -> None:
    """Files of 64 KiB cannot hold a record of a 1 MiB message: the store does not start,
    and says which files have which size."""
    data_dir = tmp_path / "data"
    _created(data_dir, 60, crash=False)
    with pytest.raises(ConfigError) as refused:
        MessageStore(small_config(data_dir, mapped_file_size_bytes=8 << 20,
                                  message_size_max_bytes=1 << 20))
    message = str(refused.value)
    assert f"{data_dir / 'commitlog'} holds commit-log files of {CREATED_BYTES} bytes" in message
    assert "message_size_max_bytes" in message
