"""The ``bench publisher`` section of RESULTS.md: throughput and a session's bytes per encoding."""

from __future__ import annotations

from typing import Any

PUBLISHER_TARGETS = {"records_per_s": 2000, "session_x_final_tokens_x4": 2.0}

_WHAT = {
    "naive": "every call's full prompt",
    "delta": "prompts delta-encoded",
    "delta_with_request": "delta + the harness's request (the conversation as text)",
}


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def publisher_section(result: dict[str, Any]) -> list[str]:
    """Throughput and session bytes per encoding, with the targets' verdicts."""
    config, tp, session = result["config"], result["throughput"], result["session"]
    settings = result.get("publisher_settings", {})
    by_tp = {e["encoding"]: e for e in tp["encodings"]}
    by_session = {e["encoding"]: e for e in session["encodings"]}
    lines = [
        "## Capture publisher (`rollstream bench publisher`)",
        "",
        f"Throughput: one `CapturePublisher` (batches of up to "
        f"{settings.get('batch_records', '?')} records, linger {settings.get('linger_ms', '?')} "
        f"ms; idempotent producer, acks=all, zstd) into the local broker, a "
        f"{config['partitions']}-partition topic configured like the events topic. "
        f"{tp['records']:,} pre-encoded CallRecords per run from sessions of {tp['turns']} calls "
        f"whose prompts grow from {tp['prompt_tokens_first']:,} to "
        f"{tp['prompt_tokens_last']:,} tokens ({tp['prompt_tokens_mean']:,.0f} on average), "
        f"{tp['sessions']} sessions at a time with their turns interleaved; timed from the "
        f"first `publish()` to the last record acknowledged, records offered as fast as the "
        f"publisher takes them (its queue below half its bound, so nothing spools). Median of "
        f"{config['rounds']} rounds alternating the encodings (range in brackets). CPU: this "
        "process (publisher and load loop).",
        "",
        "| encoding | CallRecords/s | MB/s | CPU µs/record | bytes/record: written / on the "
        "broker | lost / spooled |",
        "|---|---:|---:|---:|---|---|",
    ]
    for e in tp["encodings"]:
        low, high = e["records_per_s_range"]
        lines.append(
            f"| {e['encoding']} | {e['records_per_s']:,} ({low:,} to {high:,}) | {e['mb_per_s']} "
            f"| {e['cpu_us_per_record']} | {e['value_bytes_per_record']:,} / "
            f"{e['log_bytes_per_record']:,} | {e['lost']} / {e['spooled']} |"
        )
    lines += [
        "",
        f"Session bytes: one session of {session['turns']} calls, prompts from "
        f"{session['prompt_tokens_first']:,} to {session['prompt_tokens_last']:,} tokens, a final "
        f"context (last prompt and completion) of {session['final_tokens']:,} tokens; every "
        "record (SessionStarted, the calls, SessionEnded) published and acknowledged before the "
        "next, as a real session's calls come seconds apart, so each is its own record batch. "
        "Bytes on the broker: the topic's log segments as the broker reports them "
        "(DescribeLogDirs), compressed as stored.",
        "",
        "| encoding | what each CallRecord carries | records | bytes written | bytes on the broker "
        "| x (final tokens x 4) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for e in session["encodings"]:
        lines.append(
            f"| {e['encoding']} | {_WHAT.get(e['encoding'], '')} | {e['records']} "
            f"| {e['value_bytes']:,} | {e['log_bytes']:,} | {e['x_final_tokens_x4']} |"
        )
    lines.append("")
    delta_tp = by_tp.get("delta")
    if delta_tp is not None:
        rate = delta_tp["records_per_s"]
        ok = rate >= PUBLISHER_TARGETS["records_per_s"] and delta_tp["lost"] == 0
        lines.append(
            f"- Target ≥ {PUBLISHER_TARGETS['records_per_s']:,} CallRecords/s from one publisher "
            f"(delta-encoded, {tp['prompt_tokens_mean']:,.0f}-token prompts on average): "
            f"{_verdict(ok)} ({rate:,}/s, {delta_tp['lost']} lost)."
        )
    delta = by_session.get("delta")
    if delta is not None:
        bound = session["bound_bytes"]
        line = (
            f"- Target a {session['turns']}-call session ≤ 2 x (final tokens x 4 bytes) = "
            f"{bound:,} bytes on the broker: {_verdict(delta['log_bytes'] <= bound)} (delta: "
            f"{delta['log_bytes']:,} bytes, {delta['x_final_tokens_x4']} x final tokens x 4"
        )
        naive = by_session.get("naive")
        if naive is not None:
            line += (
                f"; naive: {naive['log_bytes']:,} bytes, "
                f"{naive['log_bytes'] / max(1, delta['log_bytes']):.1f} x the delta encoding's"
            )
        lines.append(line + ").")
    lines += _request_note(by_session.get("delta_with_request"), session)
    lines.append("")
    return lines


def _request_note(with_request: dict[str, Any] | None, session: dict[str, Any]) -> list[str]:
    if with_request is None:
        return []
    bound = session["bound_bytes"]
    over = with_request["log_bytes"] / bound
    verdict = "within the bound as well: met" if over <= 1 else f"{over:.1f} x the bound: MISSED"
    return [
        f"- The records as the interceptor writes them also keep the harness's request and "
        f"the request sent upstream, each the whole conversation as text, delta-encoded "
        f"against the session's previous requests (`harness_request_base`, "
        f"`upstream_request_base`): the session then costs {with_request['log_bytes']:,} bytes "
        f"on the broker ({over:.2f} x the bound), {verdict}. The synthetic text carries the "
        "token ids' information, four characters a token, and compresses about as well as "
        "they do; real text compresses better.",
    ]
