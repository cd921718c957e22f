"""The "Model families" section of RESULTS.md, from ``rollstream bench fidelity``'s results."""

from __future__ import annotations

from typing import Any


def _breaks(breaks: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(breaks.items())) or "0"


def _gap(row: dict[str, Any]) -> str:
    exact = row.get("exact_calls", 0)
    if not exact:
        return "-"
    mean = row["gap_tokens"] / exact
    return f"{row['gap_calls']} / {row['gap_tokens']} ({mean:.0f})"


def _outcome(row: dict[str, Any]) -> str:
    outcome = str(row["outcome"])
    failed = row.get("failed_calls", 0)
    if failed:
        outcome += f", {failed} failed call{'s' if failed > 1 else ''}"
    # A harness that ran, then a bench failure (reading its records): both are said.
    if row.get("error") and row["outcome"] != "error":
        outcome += ", bench error"
    return outcome


def table_row(row: dict[str, Any]) -> str:
    """One table row; the figures are "-" when no records could be read."""
    head = f"| {row['family']} | {row['harness']} | {row['mode']} | {_outcome(row)} "
    if "calls" not in row:
        return head + "| - " * 8 + "|"
    return head + (
        f"| {row['calls']} | {row['threads']} | {row['segments']} | {_breaks(row['breaks'])} "
        f"| {row['violations']} | {row['trainable_tokens']:,} | {row['exact_calls']} "
        f"| {_gap(row)} |"
    )


def _summary(rows: list[dict[str, Any]]) -> list[str]:
    solved = [r for r in rows if r["outcome"] == "ok"]
    measured = [r for r in rows if "calls" in r]
    violations = sum(r["violations"] for r in measured)
    exact = [r for r in solved if r["mode"] == "exact" and "calls" in r]
    one_each = [r for r in exact if r["segments"] == r["threads"]]
    lines = [
        f"- Harness runs that completed the scripted task: {len(solved)} of {len(rows)}.",
        f"- Invariant violations (strict `prefix_merge`): {violations} over {len(measured)} "
        "sessions.",
        f"- Exact mode, one segment per conversation thread: {len(one_each)} of {len(exact)} "
        "successful sessions.",
    ]
    failed = [r for r in rows if r["outcome"] != "ok" or r.get("error")]
    if failed:
        named = ", ".join(f"{r['family']}/{r['harness']}/{r['mode']}" for r in failed)
        lines.append(f"- Failed (stderr tails in `bench/results.json`): {named}.")
    return lines


def _stand_ins(families: dict[str, dict[str, Any]]) -> str:
    stand_ins = {name: f["stand_in"] for name, f in families.items() if f.get("stand_in")}
    if not stand_ins:
        return "Every family ran on its real vocabulary."
    named = "; ".join(f"{name} ({why})" for name, why in stand_ins.items())
    return (
        f"Stand-in vocabularies (the Qwen3 BPE plus the family's special tokens): {named}. "
        "The other families ran on their real vocabularies."
    )


_SERVED_BY = {
    "reference": (
        "## Model families (`rollstream bench fidelity`)",
        "the reference backend's scripted policy serving the family (its vocabulary, chat "
        "renderer and output format: reasoning, tool-call syntax); one backend and interceptor "
        "per family and mode",
    ),
    "vllm": (
        "## Model families on vLLM (`rollstream bench fidelity --engine vllm`)",
        "a real vLLM (`rollstream engine`, the CPU build) serving the family's tiny "
        "random-weight model on its real vocabulary and published chat template, with vLLM's "
        "own tool-call and reasoning parsers, the plan played by a logits processor; one "
        "server per family, one interceptor per family and mode",
    ),
}


def fidelity_section(result: dict[str, Any]) -> list[str]:
    """The section's lines: how it was run, one row per (family, harness, mode), a summary."""
    config, rows = result["config"], result["rows"]
    heading, served_by = _SERVED_BY[result.get("engine", "reference")]
    lines = [
        heading,
        "",
        f'Each real harness, headless, on the task "{result["task"]}" through an interceptor '
        f"in front of {served_by}, in both "
        "context modes. The scripted model "
        "writes the file with the shell tool, reads it back and answers. The session's "
        "CallRecords are read back from Kafka. Outcome: ok (exit 0 and hello.txt holds "
        f"polar), exit code, timeout ({config['timeout_s']:g} s), unsolved or error, and the "
        "calls that failed (answered with an error; the figures count the others). "
        "Threads: conversation threads among the calls; segments, breaks, violations and "
        "trainable tokens: strict `prefix_merge` and its checker; exact calls: calls sent "
        "upstream as tokens (exact mode); gap: exact calls whose prompt differs from the "
        "family's full re-render of the same conversation / tokens after the first "
        "difference (mean per exact call).",
        "",
        "| family | harness | mode | outcome | calls | threads | segments | breaks "
        "| violations | trainable tokens | exact calls | gap calls / tokens (mean) |",
        "|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    lines += [table_row(r) for r in rows]
    families = result.get("families", {})
    refused = {r["family"]: r["exact_refused"] for r in rows if r.get("exact_refused")}
    lines += ["", *_summary(rows)]
    lines += [
        f"- {name}: exact context refused by the interceptor's upstream check (its calls went "
        f"as messages): {why.removeprefix('exact context refused: ')[:400]}"
        for name, why in refused.items()
    ]
    lines += ["", _stand_ins(families)]
    uncovered = {name: f["not_covered"] for name, f in families.items() if f.get("not_covered")}
    if uncovered:
        named = "; ".join(f"{name}: {why}" for name, why in uncovered.items())
        lines.append(f"On the nearest architecture the CPU build runs: {named}.")
    lines += [f"The matrix took {result['seconds'] / 60:.1f} min.", ""]
    return lines
