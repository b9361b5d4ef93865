"""The HA link's bytes are unchanged by the classic core: a session recorded with this build
is byte for byte the one recorded with the build before it (main at ec09fdc, whose ha/ is
this branch's base, where the decisions still lived in the socket threads), in both
directions, so a slave of that build and
a master of this one (and the other way round) interoperate. The sessions are made
deterministic by tests/support/ha_transcript.py (fixed nonces, ids and record timestamps);
recorded/*.bin are its output for the old build (how to record them: its docstring)."""

from __future__ import annotations

from pathlib import Path

from tests.support.ha_transcript import master_transcript, slave_transcript

DATA = Path(__file__).parent / "recorded"


def test_the_master_sends_what_the_old_master_sent(tmp_path: Path) -> None:
    """Hello, proof, epoch decision and history, and every transfer frame with its tag: the
    same bytes for the same (old build's) slave bytes."""
    master_sent, slave_sent = master_transcript(tmp_path)
    assert slave_sent == (DATA / "scripted_slave_sent.bin").read_bytes()
    assert master_sent == (DATA / "master_sent.bin").read_bytes()


def test_the_slave_sends_what_the_old_slave_sent(tmp_path: Path) -> None:
    """Answer and proof, epochs and max offset, the first report and the ack after a frame,
    each with its tag: the same bytes for the same (old build's) master bytes."""
    assert slave_transcript(tmp_path) == (DATA / "slave_sent.bin").read_bytes()
