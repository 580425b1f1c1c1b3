"""``make demo``'s integrity step on its own: real control, sql worker and MockMed processes.

The screen reward, audited by the sql worker at a boundary with a quarter banner lies, fails on
asymmetric acceptance and pauses the run; the reviewed ``continue`` is appended to the audit's
decision history (it supersedes the automatic entry, which stays listed), and the step exits 0.
"""

from __future__ import annotations

import io
import re

import pytest

from rewardseal_kit.proof.integrity.demo import REVIEW_REASON, run

pytestmark = pytest.mark.slow


def test_the_audit_pauses_the_run_and_a_review_lets_it_continue() -> None:
    out = io.StringIO()
    assert run(out) == 0, out.getvalue()
    text = out.getvalue()
    assert "104 rows, 25% banner lies" in text
    assert "optimizer (screen reward) accepts 104, sentinel (sql worker) accepts 78" in text
    assert "optimizer-only 25%" in text
    assert re.search(r"signed bundle sha256:[0-9a-f]{64} verified", text)
    history = re.findall(r"^(\d+)\s+(automatic|reviewed)\s+(\w+)\s+(\w+)\s+(.*)$", text, re.M)
    assert [entry[:4] for entry in history] == [
        ("0", "automatic", "fail", "pause"),
        ("1", "reviewed", "fail", "continue"),
    ]
    assert "optimizer_only_rate_above_maximum" in history[0][4]
    assert history[1][4].startswith(REVIEW_REASON)
    assert "(reviewer: " in history[1][4]
    assert text.rstrip().endswith("the reviewed continue lets it resume")
