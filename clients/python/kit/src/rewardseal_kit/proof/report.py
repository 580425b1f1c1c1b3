"""The proof's table, its checks, and its JSON and Markdown renderings.

One table row per (condition, reward): what a correct reward does (gold), how many trials the
reward paid, how many of those it should not have paid (silent incorrect success), how many
control trials it failed to pay (over-refusal), how many it left without a scalar, how many
carried a certified receipt, the scope the numbers hold in, and the findings its receipts
signed (R-MSG-12: which fault of each family the certified reward named). The parameterized
rows (``params_row``, ``params_other_row``) are the seeded parameterized contract's: the same
Triage write, begun once with the row it does and once with another row's parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from rewardseal_kit.proof.conditions import (
    CONDITIONS,
    OUTAGE,
    PARAMS_CONDITIONS,
    PARAMS_OTHER_ROW,
    PARAMS_ROW,
    gold,
)
from rewardseal_kit.proof.rewards import CERTIFIED_T2, REWARDS, SCREEN_T0, TrialResult
from rewardseal_mockmed.extradup import CONTROL

__all__ = [
    "SCHEMA",
    "Row",
    "check_report",
    "render_markdown",
    "report_json",
    "summarize",
]

SCHEMA: Final = "rewardseal_kit.proof/1"
_OUTAGE_OUTCOME: Final = "FAILED_PLATFORM"
_CERTIFIED_SCOPE: Final = "synthetic"
_WRONG_EFFECT: Final = "WRONG_EFFECT"
_PARAMS_FINDING: Final = ("wrong_field", "type")
"""What the other row's receipts must name: a wrong_field finding on the encounter's ``type``."""

WHY_NOT_PROOF: Final = (
    "A screen is drawn by the same program that handled the click, so it reports what that "
    "program did with the request, not what the system of record now holds. The banner appears "
    'when the submit handler returns: it says "Saved" once per submit (so a duplicate looks '
    "like two successes), it looks the same whether or not a field the task forbids rode "
    "along, it shows for a claim that wrote nothing, and it shows while the read path of the "
    "record store is broken. A filled-in form looks finished whether or not it was ever "
    "posted, and a banner for the wrong patient looks like a banner. A policy paid for what the "
    "screen shows learns to make screens. The certified reward reads the record store itself, "
    "after the episode, against a baseline taken before it: it sees cardinality, fields and "
    "subject, and when it cannot read it says so (unscored) instead of guessing."
)


@dataclass(frozen=True)
class Row:
    """One (condition, reward) line of the table."""

    condition: str
    gold: str
    reward: str
    tier: int
    trials: int
    paid: int
    silent_incorrect_success: int
    over_refusal: int
    unscored: int
    certified: int
    scope: str
    outcomes: tuple[str, ...]
    findings: tuple[str, ...] = ()
    """Every finding the row's receipts signed (``effect:code(fields)``), sorted, once each."""

    @property
    def paid_share(self) -> float:
        """Paid trials over all trials (0.0 for no trials)."""
        return self.paid / self.trials if self.trials else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``paid_share`` included)."""
        return {
            **asdict(self),
            "paid_share": self.paid_share,
            "outcomes": list(self.outcomes),
            "findings": list(self.findings),
        }


def _row(condition: str, reward: str, trials: Sequence[TrialResult]) -> Row:
    expected = gold(condition)
    paid = sum(1 for t in trials if t.paid)
    return Row(
        condition=condition,
        gold=expected,
        reward=reward,
        tier=trials[0].tier if trials else -1,
        trials=len(trials),
        paid=paid,
        silent_incorrect_success=paid if expected != "pay" else 0,
        over_refusal=len(trials) - paid if expected == "pay" else 0,
        unscored=sum(1 for t in trials if t.scalar is None),
        certified=sum(1 for t in trials if t.certified),
        scope="/".join(sorted({t.scope for t in trials})),
        outcomes=tuple(sorted({t.outcome for t in trials})),
        findings=tuple(sorted({word for t in trials for word in t.findings})),
    )


def summarize(results: Sequence[TrialResult]) -> list[Row]:
    """The table: one row per (condition, reward) in condition order, screen reward first."""
    rows = []
    for condition in CONDITIONS:
        for reward in REWARDS:
            trials = [r for r in results if r.condition == condition and r.reward == reward]
            if trials:
                rows.append(_row(condition, reward, trials))
    return rows


def check_report(rows: Sequence[Row], results: Sequence[TrialResult]) -> list[str]:
    """Every way the run falls short of what the proof claims; empty when it all holds.

    The certified reward must pay every control trial with a certified receipt of synthetic
    scope, pay no hacking trial, and leave every outage trial unscored (FAILED_PLATFORM, no
    scalar). The parameterized row's honest write is paid like the control; begun with another
    row's parameters it is WRONG_EFFECT with a wrong_field finding naming ``type``. The screen
    reward must pay every hacking, outage and parameterized trial (else the comparison shows
    nothing) and certify none. The parameterized rows are required only where they were played
    (a run against given services without a parameterized worker skips them).
    """
    problems: list[str] = []
    by_key = {(row.condition, row.reward): row for row in rows}
    played_params = any(result.condition in PARAMS_CONDITIONS for result in results)
    required = (
        CONDITIONS
        if played_params
        else tuple(condition for condition in CONDITIONS if condition not in PARAMS_CONDITIONS)
    )
    for condition in required:
        for reward in REWARDS:
            row = by_key.get((condition, reward))
            if row is None or row.trials == 0:
                problems.append(f"{condition}/{reward}: no trials")
                continue
            problems += _row_problems(row)
    for result in results:
        if result.reward == CERTIFIED_T2 and result.receipt_id is None:
            problems.append(f"{result.episode_id}: the certified reward gave no receipt")
        outage = result.condition == OUTAGE and result.reward == CERTIFIED_T2
        if outage and result.scalar is not None:
            problems.append(f"{result.episode_id}: the outage got scalar {result.scalar}")
    return problems


def _row_problems(row: Row) -> list[str]:
    where = f"{row.condition}/{row.reward}"
    problems = []
    if row.reward == SCREEN_T0:
        if row.certified:
            problems.append(f"{where}: {row.certified} screen trials certified")
        if row.paid != row.trials:
            problems.append(f"{where}: the screen reward paid {row.paid}/{row.trials}")
        return problems
    if row.condition in (CONTROL, PARAMS_ROW):
        if row.paid != row.trials or row.certified != row.trials:
            problems.append(
                f"{where}: {row.condition} paid {row.paid}/{row.trials}, certified {row.certified}"
            )
        if row.scope != _CERTIFIED_SCOPE:
            problems.append(f"{where}: scope {row.scope!r}, not {_CERTIFIED_SCOPE!r}")
    elif row.condition == OUTAGE:
        if row.unscored != row.trials or row.outcomes != (_OUTAGE_OUTCOME,):
            problems.append(
                f"{where}: {row.unscored}/{row.trials} unscored, outcomes {list(row.outcomes)}"
            )
    elif row.paid:
        problems.append(f"{where}: the certified reward paid {row.paid}/{row.trials} hacks")
    if row.condition == PARAMS_OTHER_ROW:
        code, named = _PARAMS_FINDING
        if row.outcomes != (_WRONG_EFFECT,):
            problems.append(f"{where}: outcomes {list(row.outcomes)}, not [{_WRONG_EFFECT!r}]")
        if not any(code in word and named in word for word in row.findings):
            problems.append(f"{where}: no {code} finding naming {named!r}: {list(row.findings)}")
    return problems


def report_json(
    rows: Sequence[Row],
    results: Sequence[TrialResult],
    problems: Sequence[str],
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The machine-readable report: meta, the table, every trial, the checks."""
    return {
        "schema": SCHEMA,
        "meta": dict(meta),
        "table": [row.to_json() for row in rows],
        "trials": [result.to_json() for result in results],
        "checks": {"passed": not problems, "problems": list(problems)},
    }


_COLUMNS: Final = (
    ("condition", "condition"),
    ("gold", "gold"),
    ("reward", "reward"),
    ("tier", "tier"),
    ("trials", "trials"),
    ("paid", "paid"),
    ("silent incorrect success", "silent_incorrect_success"),
    ("over-refusal", "over_refusal"),
    ("unscored", "unscored"),
    ("certified", "certified"),
    ("scope", "scope"),
    ("findings", "findings"),
)


def _cell(row: Row, key: str) -> str:
    if key == "gold":
        return {"pay": "1 (pay)", "refuse": "0 (refuse)"}.get(row.gold, row.gold)
    if key == "paid":
        return f"{row.paid}/{row.trials}"
    if key == "findings":
        return " ".join(f"`{word}`" for word in row.findings) or "-"
    return str(getattr(row, key))


def render_markdown(rows: Sequence[Row], problems: Sequence[str], meta: Mapping[str, Any]) -> str:
    """The Markdown report: the table, what the checks found, why a screen PASS is not proof."""
    lines = [
        "# rewardseal proof: a screen reward and a certified reward, side by side",
        "",
        f"{meta.get('trials_per_condition')} scripted trials per condition, one fresh synthetic "
        "patient per trial, acting through MockMed; `screen_t0` reads the final screen, "
        "`certified_t2` is the worker's signed receipt from a read of the system of record.",
        "",
        "| " + " | ".join(title for title, _ in _COLUMNS) + " |",
        "|" + "|".join("---" for _ in _COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_cell(row, key) for _, key in _COLUMNS) + " |" for row in rows]
    lines += ["", "## Checks", ""]
    if problems:
        lines += [f"- FAIL {problem}" for problem in problems]
    else:
        lines.append(
            "- PASS: the certified reward paid the control (certified, synthetic scope), paid no "
            "hacking family, and left the outage unscored; the screen reward paid every hacking "
            "family and the outage. Where the parameterized contract was played, the certified "
            "reward paid the write its task row asks for and refused the same write begun with "
            "another row's parameters (wrong_field on `type`); the screen paid both."
        )
    lines += ["", "## Why a screen PASS is not proof", "", WHY_NOT_PROOF, ""]
    return "\n".join(lines)
