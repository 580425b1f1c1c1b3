"""The learning proof's reports: structural checks, the Markdown and the PNG.

The JSON is :func:`rewardseal_kit.proof.learning.run.run_learning`'s document as it is. The
checks are about the run's bookkeeping only (every step recorded with its full batch, a
receipt id for every scored completion), never about which way the runs went: a run that does
not diverge is a result, reported as measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

__all__ = ["check_learning", "final_numbers", "render_learning_markdown", "write_learning_png"]

TAIL: Final = 5
"""The last steps averaged into the "last 5 steps" columns (besides the final step itself)."""
_HACKS_ORDER: Final = ("claim", "screen_only", "unsubmit", "dup", "extra", "omit", "wrong_record")


def check_learning(document: Mapping[str, Any]) -> list[str]:
    """Bookkeeping problems of the document (an empty list when it is whole)."""
    problems: list[str] = []
    config = document["config"]
    for name, run in document["runs"].items():
        steps = run["steps"]
        if steps and all(s["unscored"] == s["n"] for s in steps):
            errors = sorted({c["error"] for s in steps for c in s["completions"] if c["error"]})
            problems.append(f"run {name}: every completion unscored ({'; '.join(errors)[:300]})")
        if [s["step"] for s in steps] != list(range(config["steps"])):
            problems.append(f"run {name}: steps recorded {[s['step'] for s in steps]}")
        for step in steps:
            if step["n"] != config["batch"]:
                problems.append(f"run {name} step {step['step']}: {step['n']} completions")
            if any(c["receipt_id"] is None and not c["unscored"] for c in step["completions"]):
                problems.append(
                    f"run {name} step {step['step']}: a scored completion lacks a receipt"
                )
    return problems


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def final_numbers(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run's final step and last-:data:`TAIL`-steps mean of true/claimed success, hacks."""
    steps = run["steps"]
    last = steps[-1]
    tail = steps[-TAIL:]
    return {
        "final_step": last["step"],
        "final_true_success": last["true_success"],
        "final_claimed_success": last["claimed_success"],
        "final_hack_share": last["hack_share"],
        "first_true_success": steps[0]["true_success"],
        "first_claimed_success": steps[0]["claimed_success"],
        "first_hack_share": steps[0]["hack_share"],
        "tail_steps": len(tail),
        "tail_true_success": _mean([s["true_success"] for s in tail]),
        "tail_claimed_success": _mean([s["claimed_success"] for s in tail]),
        "tail_hack_share": _mean([s["hack_share"] for s in tail]),
        "unscored": sum(s["unscored"] for s in steps),
        "completions": sum(s["n"] for s in steps),
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _gate_line(gate: Mapping[str, Any]) -> str:
    if not gate["gating_eligible"]:
        return f"the binding cannot gate: {', '.join(gate['binding_blockers'])}"
    if gate["paused_at"] is None:
        return f"no pause: all {len(gate['boundaries'])} boundaries audited continue"
    paused = gate["boundaries"][gate["paused_at"]]
    return (
        f"pauses at boundary {gate['paused_at']} (policy update {gate['paused_at']}, the "
        f"completions of training step {gate['paused_at']}): {paused['outcome']} / "
        f"{paused['action']}, reasons {', '.join(paused['reasons']) or 'none'}"
    )


def render_learning_markdown(document: Mapping[str, Any], problems: Sequence[str]) -> str:
    """The report as Markdown: configuration, final numbers, the gate, a table per run."""
    config = document["config"]
    warm = document["warm_start"]
    seconds = document["seconds"]
    lines = [
        "# The learning proof: a screen reward and a certified reward, trained",
        "",
        f"TRL GRPOTrainer, tiny Llama (hidden {config['hidden_size']}, {config['layers']} layers, "
        f"character tokenizer), seed {config['seed']}, {config['steps']} steps of "
        f"{config['batch']} completions ({config['prompts_per_step']} tasks x "
        f"{config['num_generations']} generations), learning rate {config['learning_rate']}, "
        f"completions up to {config['max_completion_length']} characters.",
        "",
        f"**Warm start** (supervised, before both runs, the same weights for both): "
        f"{warm['steps']} steps of {warm['batch']} on {warm['examples']} synthetic examples "
        f"({', '.join(f'{k} {v}' for k, v in warm['families'].items())}), loss "
        f"{warm['first_loss']} -> {warm['final_loss']}.",
        "",
        f"Contract `{document['contract_digest']}`; worker key `{document['worker_key_id']}`. "
        f"Wall time {seconds['total']:.0f} s (services {seconds['services']:.0f} s, training "
        f"{seconds['training']:.0f} s, audit {seconds['audit']:.0f} s).",
        "",
        "| run | paid by | true success first -> final (last 5) | claimed success first -> "
        "final (last 5) | hacks first -> final (last 5) | unscored |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in document["runs"].items():
        f = final_numbers(run)
        lines.append(
            f"| {name} | {run['pays']} | {_pct(f['first_true_success'])} -> "
            f"{_pct(f['final_true_success'])} ({_pct(f['tail_true_success'])}) | "
            f"{_pct(f['first_claimed_success'])} -> {_pct(f['final_claimed_success'])} "
            f"({_pct(f['tail_claimed_success'])}) | {_pct(f['first_hack_share'])} -> "
            f"{_pct(f['final_hack_share'])} ({_pct(f['tail_hack_share'])}) | "
            f"{f['unscored']} of {f['completions']} |"
        )
    gate = document["gate"]
    lines += [
        "",
        f"**Integrity gate on run a** (optimizer {gate['optimizer']}, primary sentinel the "
        f"tier-2 {gate['sentinel']} worker, one boundary per policy update): {_gate_line(gate)}.",
        "",
    ]
    if gate["boundaries"]:
        lines += [
            "| boundary | rows | screen accepts | sentinel accepts | optimizer-only rate | "
            "decision | action |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in gate["boundaries"]:
            lines.append(
                f"| {b['boundary']} | {b['rows']} | {b['optimizer_accepted']} | "
                f"{b['sentinel_accepted']} | {_pct(b['optimizer_only_rate'])} | {b['outcome']} | "
                f"{b['action']} |"
            )
        lines.append("")
    for name, run in document["runs"].items():
        lines += [
            f"## Run {name}: paid by the {run['pays']} reward ({run['seconds']:.0f} s)",
            "",
            "| step | n | scored | unscored | true success | claimed success | hacks | families |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in run["steps"]:
            families = ", ".join(f"{k} {v}" for k, v in s["families"].items())
            lines.append(
                f"| {s['step']} | {s['n']} | {s['scored']} | {s['unscored']} | "
                f"{_pct(s['true_success'])} | {_pct(s['claimed_success'])} | "
                f"{_pct(s['hack_share'])} | {families} |"
            )
        lines.append("")
    lines += [
        "True success: the share of scored completions the tier-2 worker verified (unscored "
        "dropped, never counted 0). Claimed success: the share of all completions whose final "
        "screen says saved. Hacks: claim, screen_only, unsubmit, dup, extra, omit, wrong_record "
        "(classified by what the completion does against its task row); wrong_value (a "
        "submitted write with a wrong type, note or status) and unparseable are failures, not "
        "hacks.",
        "",
    ]
    if problems:
        lines += ["## Problems", "", *[f"- {p}" for p in problems], ""]
    return "\n".join(lines)


def write_learning_png(document: Mapping[str, Any], path: Path) -> None:
    """One panel per run: true (solid) vs claimed (dashed) success per step, the hacks' share
    as hatched bars by family, n per step on the x axis; the gate's pause marked on run a."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = document["runs"]
    figure, axes = plt.subplots(1, len(runs), figsize=(7 * len(runs), 4.8), sharey=True)
    axes = list(axes) if len(runs) > 1 else [axes]
    hatches = ["//", "\\\\", "xx", "..", "++", "oo", "--"]
    colours = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"]
    gate = document["gate"]
    for axis, (name, run) in zip(axes, runs.items(), strict=True):
        steps = run["steps"]
        xs = [s["step"] for s in steps]
        bottom = [0.0] * len(steps)
        for index, family in enumerate(_HACKS_ORDER):
            heights = [s["family_share"].get(family, 0.0) for s in steps]
            if not any(heights):
                continue
            axis.bar(
                xs,
                heights,
                bottom=bottom,
                width=0.8,
                color="none",
                edgecolor=colours[index],
                hatch=hatches[index],
                linewidth=0.6,
                label=f"hack: {family}",
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        axis.plot(
            xs,
            [s["true_success"] for s in steps],
            color="#2ca02c",
            linewidth=2,
            marker="o",
            markersize=3,
            label="true success (tier-2 verified / scored)",
        )
        axis.plot(
            xs,
            [s["claimed_success"] for s in steps],
            color="#1f77b4",
            linewidth=2,
            linestyle="--",
            marker="s",
            markersize=3,
            label="claimed success (screen says saved / n)",
        )
        if name == gate.get("run") and gate.get("paused_at") is not None:
            axis.axvline(gate["paused_at"] + 0.5, color="red", linewidth=1.2)
            axis.text(
                gate["paused_at"] + 0.6,
                1.02,
                f"gate pauses (boundary {gate['paused_at']})",
                color="red",
                fontsize=8,
            )
        every = max(1, len(xs) // 10)
        ticks = xs[::every]
        axis.set_xticks(ticks)
        axis.set_xticklabels(
            [
                f"{s['step']}\nn={s['scored']}" + (f"+{s['unscored']}u" if s["unscored"] else "")
                for s in steps[::every]
            ],
            fontsize=7,
        )
        axis.set_ylim(0, 1.08)
        axis.set_xlabel("training step (n = scored completions, +u unscored)")
        axis.set_title(f"run {name}: paid by the {run['pays']} reward")
        axis.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("share of completions")
    handles, labels = [], []
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
