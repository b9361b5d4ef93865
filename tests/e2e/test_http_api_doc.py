"""docs/http-api.md says its commands ran in the order shown against a SYNC_MASTER and its
SLAVE: they are run so here (tests/support/doc_examples.py), and every answer, status and
content type must be the one the doc shows (timestamps, rates and the like by type only)."""

from __future__ import annotations

import pytest

from tests.support.brokers import Launcher
from tests.support.doc_examples import HTTP_API, differences, examples, run_all, start_pair

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def test_every_example_answers_as_documented(launch: Launcher) -> None:
    text = HTTP_API.read_text(encoding="utf-8")
    pair = start_pair(launch)
    problems = [f"{example.heading}: $ {example.command}\n  " + "\n  ".join(found)
                for example, got, status, content_type in run_all(pair, text)
                if (found := differences(example, got, status, content_type))]
    ran = [example for example in examples(text) if example.run]
    assert len(ran) >= 40, "the examples were not found"
    assert not problems, (f"{len(problems)} of {len(ran)} examples answer otherwise than "
                          "docs/http-api.md shows (`python -m tests.support.doc_examples "
                          "--write` rewrites the answers):\n\n" + "\n\n".join(problems))
