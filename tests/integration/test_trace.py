"""Traces (issue 25): brisk serve --trace-out records every finished request; brisk bench --trace
replays it, and Mooncake's and Azure's formats, against real servers (docs/trace.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from conftest import (BRISK_BIN, MODEL_NAME, REPO_ROOT, _start_brisk, _stop_and_check_clean_exit,
                      assert_openai_error, get_metrics, read_requests_csv, run_bench_args)

# Servers of their own and the session ones, no time measured: runs beside another test.
pytestmark = pytest.mark.parallel

TRACES_DIR = REPO_ROOT / "data" / "traces"
# Long enough that two prompts sharing it share several whole 16-token blocks.
SHARED_PREFIX = "You are a careful assistant. Answer in one short sentence. " * 20


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_lines(path: Path, count: int, timeout_s: float = 10) -> list[dict]:
    """The writer thread appends shortly after each request finishes."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = read_lines(path) if path.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.fixture(scope="module")
def recorded(traced):
    """Four requests: two completions sharing a long prefix, a chat with `user`, a chat with an
    X-Session-Id header. Returns (their responses' usage, the trace lines)."""
    server, path = traced
    usages = []
    with server.client() as client:
        for suffix in ("What is the capital of France?", "Name a primary colour."):
            r = client.post("/v1/completions", json={"prompt": SHARED_PREFIX + suffix,
                                                     "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200, r.text
            usages.append(r.json()["usage"])
        r = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3,
            "user": "alice"})
        assert r.status_code == 200, r.text
        usages.append(r.json()["usage"])
        r = client.post("/v1/chat/completions", headers={"X-Session-Id": "conversation-9"},
                        json={"messages": [{"role": "user", "content": "Say bye."}],
                              "max_tokens": 2, "priority": 3})
        assert r.status_code == 200, r.text
        usages.append(r.json()["usage"])
    lines = wait_for_lines(path, 4)
    assert len(lines) == 4, lines
    return usages, sorted(lines, key=lambda line: line["arrival_s"])


def test_every_finished_request_is_a_line_with_its_lengths_and_timings(recorded):
    usages, lines = recorded
    for usage, line in zip(usages, lines):
        assert line["input_tokens"] == usage["prompt_tokens"], line
        assert line["output_tokens"] == usage["completion_tokens"], line
        assert line["model"] == MODEL_NAME
        assert line["finish_reason"] == "length"
        assert 0 < line["ttft_ms"] <= line["e2e_ms"], line
        assert line["block_tokens"] == 16
        assert len(line["hash_ids"]) == -(-line["input_tokens"] // 16)
        assert "prompt" not in line, "no text without --trace-text"
    assert [line["endpoint"] for line in lines] == ["completions", "completions", "chat", "chat"]
    assert [line["max_tokens"] for line in lines] == [4, 4, 3, 2]
    assert [line["session"] for line in lines] == [None, None, "alice", "conversation-9"]
    assert [line["priority"] for line in lines] == [0, 0, 0, 3]
    assert lines[0]["arrival_s"] < lines[1]["arrival_s"] < lines[2]["arrival_s"]


def test_shared_prefixes_have_equal_hashes_and_the_rest_differ(traced, recorded):
    server, _ = traced
    _, lines = recorded
    first, second = lines[0]["hash_ids"], lines[1]["hash_ids"]
    r = httpx.post(server.base_url + "/tokenize",
                   json={"content": SHARED_PREFIX, "add_special": True}, timeout=30)
    # Whole blocks inside the common prefix (its last token may merge with what follows).
    shared = (len(r.json()["tokens"]) - 1) // 16
    assert shared >= 8
    assert first[:shared] == second[:shared]
    assert first[-1] != second[-1]
    assert not set(lines[2]["hash_ids"]) & set(first)
    # The second prompt reused the first's cached cells, and the line says how many.
    assert lines[1]["cached_tokens"] >= 16 * shared, lines[1]


def test_metrics_count_the_lines_written(traced, recorded):
    server, _ = traced
    metrics = get_metrics(server)
    assert metrics["brisk_trace_lines_written_total"] >= 4
    assert metrics["brisk_trace_lines_dropped_total"] == 0


def test_sighup_reopens_the_trace_after_a_rotation(traced, recorded):
    server, path = traced
    rotated = path.with_suffix(".1")
    os.rename(path, rotated)
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while get_metrics(server)["brisk_trace_reopens_total"] < 1:
        assert time.monotonic() < deadline, "SIGHUP did not reopen the trace"
        time.sleep(0.05)
    with server.client() as client:
        r = client.post("/v1/completions", json={"prompt": "After the rotation", "max_tokens": 2})
        assert r.status_code == 200, r.text
    assert len(wait_for_lines(path, 1)) == 1
    assert len(read_lines(rotated)) >= 4
    assert server.proc.poll() is None, "SIGHUP ended the server"


def test_a_bad_user_or_session_header_is_a_400_naming_user(traced):
    server, _ = traced
    with server.client() as client:
        r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "user": 7})
        assert assert_openai_error(r, 400)["param"] == "user"
        r = client.post("/v1/completions", headers={"X-Session-Id": "s" * 300},
                        json={"prompt": "x", "max_tokens": 1})
        assert assert_openai_error(r, 400)["param"] == "user"


def test_trace_text_adds_the_prompt(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace-text") / "trace.jsonl"
    server = _start_brisk(tmp_path_factory, "brisk-trace-text",
                          ["--trace-out", str(path), "--trace-text"], api_key=None)
    try:
        with server.client() as client:
            r = client.post("/v1/completions", json={"prompt": "Remember the word banana.",
                                                     "max_tokens": 2})
            assert r.status_code == 200, r.text
        lines = wait_for_lines(path, 1)
    finally:
        _stop_and_check_clean_exit(server)
    assert "Remember the word banana." in lines[0]["prompt"]


def test_an_unwritable_trace_is_refused_at_start(tmp_path):
    proc = subprocess.run([str(BRISK_BIN), "serve", "--trace-out", "/nonexistent-dir/t.jsonl"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot open --trace-out /nonexistent-dir/t.jsonl" in proc.stderr


def test_a_recorded_trace_replays_with_its_schedule_and_exact_lengths(traced, recorded,
                                                                     tmp_path_factory, tmp_path):
    """Replayed against a fresh server: every request's prompt and output lengths are the
    recorded ones, sent at the recorded offsets."""
    _, lines = recorded
    trace = tmp_path / "recorded.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    target = _start_brisk(tmp_path_factory, "brisk-replay-target", ["--max-seqs", "4"],
                          api_key=None)
    try:
        out = tmp_path / "replay"
        proc = run_bench_args("--url", target.base_url, "--trace", trace, "--out", out)
    finally:
        _stop_and_check_clean_exit(target)
    assert "prompts as token ids (exact lengths)" in proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["workload"]["source"] == "trace"
    assert result["workload"]["trace_format"] == "brisk"
    run = result["runs"][0]
    assert run["load"]["arrivals"] == "trace"
    assert run["requests"] == {"ok": 4, "failed": 0, "timeouts": 0}
    rows = sorted(read_requests_csv(out), key=lambda row: float(row["scheduled_ms"]))
    first = lines[0]["arrival_s"]
    for row, line in zip(rows, lines):
        assert int(row["prompt_tokens"]) == line["input_tokens"]
        assert int(row["completion_tokens"]) == line["output_tokens"]
        assert float(row["scheduled_ms"]) == pytest.approx((line["arrival_s"] - first) * 1000,
                                                           abs=0.01)


def test_the_mooncake_sample_replays_with_its_prefix_sharing(brisk, tmp_path):
    """Its hash ids repeat (turns of three conversations), so the server's prefix cache hits: the
    first 0.95 s of it, where request 6 starts with request 4's block."""
    before = get_metrics(brisk)
    out = tmp_path / "mooncake"
    proc = run_bench_args("--url", brisk.base_url, "--trace", TRACES_DIR / "mooncake_sample.jsonl",
                     "--time-scale", "0.2", "--max-duration", "0.19", "--warmup-requests", "0",
                     "--out", out)
    assert "(mooncake)" in proc.stderr
    after = get_metrics(brisk)
    records = [json.loads(line) for line in
               (TRACES_DIR / "mooncake_sample.jsonl").read_text().splitlines()]
    start = records[0]["timestamp"]
    kept = [r for r in records if (r["timestamp"] - start) / 1000 * 0.2 < 0.19]
    rows = sorted(read_requests_csv(out), key=lambda row: float(row["scheduled_ms"]))
    assert len(rows) == len(kept) >= 5
    for row, record in zip(rows, kept):
        assert row["error"] == "", row
        assert int(row["prompt_tokens"]) == record["input_length"]
        assert int(row["completion_tokens"]) == record["output_length"]
    hit = after["brisk_prefix_cache_hit_tokens_total"] - before["brisk_prefix_cache_hit_tokens_total"]
    assert hit > 0
    # bench scraped the same counters around its run and reports what changed.
    server = json.loads((out / "result.json").read_text())["runs"][0]["server"]
    assert server["dialect"] == "brisk"
    assert server["prefix_cache_hit_tokens"] == hit
    assert 0 < server["prefix_cache_hit_rate"] < 1
    assert server["preemptions"] == 0 and server["rejections"] == {}
    assert "prefix cache" in proc.stderr


def test_the_azure_sample_replays_against_llama_server(llama_server, tmp_path):
    out = tmp_path / "azure"
    proc = run_bench_args("--url", llama_server.base_url, "--trace", TRACES_DIR / "azure_sample.csv",
                     "--max-duration", "0.5", "--out", out)
    assert "(azure)" in proc.stderr
    # This llama-server has no /metrics (no --metrics): the replay runs, its deltas are null.
    assert json.loads((out / "result.json").read_text())["runs"][0]["server"] is None
    rows = read_requests_csv(out)
    assert rows and all(row["error"] == "" for row in rows), rows
    lengths = [line.split(",") for line in
               (TRACES_DIR / "azure_sample.csv").read_text().splitlines()[1:]]
    for row, (_, context, generated) in zip(
            sorted(rows, key=lambda row: float(row["scheduled_ms"])), lengths):
        assert int(row["prompt_tokens"]) == int(context)
        assert int(row["completion_tokens"]) == int(generated)


def test_bad_traces_and_conflicting_flags_are_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 1}\n'
                   '{"arrival_s": 1, "input_tokens": "many", "output_tokens": 1}\n')
    proc = run_bench_args("--url", "http://127.0.0.1:9", "--model", "m", "--trace", bad, check=False)
    assert proc.returncode == 2
    assert f'{bad}:2: "input_tokens" must be a whole number, got "many"' in proc.stderr
    proc = run_bench_args("--url", "http://127.0.0.1:9", "--model", "m", "--trace",
                     TRACES_DIR / "azure_sample.csv", "--rate", "5", check=False)
    assert proc.returncode != 0
    assert "--rate excludes --trace" in proc.stderr
    proc = run_bench_args("--url", "http://127.0.0.1:9", "--model", "m", "--time-scale", "2",
                     check=False)
    assert proc.returncode != 0
    assert "--time-scale requires --trace" in proc.stderr + proc.stdout
