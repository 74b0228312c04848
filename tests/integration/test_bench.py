"""`brisk bench` against real servers: brisk serve and llama-server from the same build."""

from __future__ import annotations

import contextlib
import csv
import http.server
import json
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import BRISK_BIN, free_port, scripted_stream_server

STAT_KEYS = {"mean", "std", "p50", "p90", "p95", "p99", "max"}


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A test server's handler: no access log on stderr; send_json answers with a JSON body."""

    def send_json(self, document) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def python_server(handler_class):
    """A threading http.server on loopback with `handler_class`; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def run_bench(url: str, out_dir, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    argv = [str(BRISK_BIN), "bench", "--url", url, "--concurrency", "1,2", "--num-requests", "4",
            "--warmup-requests", "1", "--input-tokens", "32", "--output-tokens", "8",
            "--out", str(out_dir), *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def check_result(out_dir, model: str) -> dict:
    result = json.loads((out_dir / "result.json").read_text())
    assert result["target"]["model"] == model
    assert result["workload"]["input_tokens"] == 32
    assert [run["load"] for run in result["runs"]] == [{"concurrency": 1}, {"concurrency": 2}]
    for run in result["runs"]:
        assert run["requests"] == {"ok": 4, "failed": 0, "timeouts": 0}
        for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert set(run[metric]) >= STAT_KEYS
            assert 0 < run[metric]["p50"] <= run[metric]["max"]
        assert run["ttft_ms"]["max"] < run["e2e_ms"]["max"]
        assert run["output_token_throughput"] > 0
    rows = list(csv.DictReader((out_dir / "requests.csv").open()))
    measured = [r for r in rows if r.get("status") == "200"]
    assert len(measured) >= 8
    return result


def test_bench_against_brisk_counts_exact_tokens(brisk, tmp_path):
    run_bench(brisk.base_url, tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "Chart.js v3" in html  # inlined from libjs-chart.js: the page opens offline
    assert "src=\"http" not in html
    for label in ("concurrency 1", "concurrency 2"):
        assert label in html
    for canvas in ("curve", "inflight", "ttft", "itl"):
        assert f'id="{canvas}"' in html
    result = check_result(tmp_path, "gemma3-270m")
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    # brisk sends one chunk per UTF-8-complete piece: a token that ends inside a character (or
    # decodes to nothing) shares the next chunk. Such requests are counted, never hidden.
    for index, run in enumerate(result["runs"]):
        measured = [r for r in rows if int(r["run"]) == index and r["status"] == "200"]
        mismatched = [r for r in measured if int(r["chunks"]) != int(r["completion_tokens"])]
        assert run["chunk_token_mismatch"] == len(mismatched)
        # result.json's throughput is the requests' own usage over the run's duration.
        tokens = sum(int(r["completion_tokens"]) for r in measured)
        assert run["output_token_throughput"] == pytest.approx(tokens / run["duration_s"],
                                                               rel=1e-9)
    assert {int(r["completion_tokens"]) for r in rows} == {8}
    assert {int(r["prompt_tokens"]) for r in rows} == {32}


def test_bench_against_llama_server(llama_server, tmp_path):
    proc = run_bench(llama_server.base_url, tmp_path)
    # The model brisk bench found, against the one the server lists (it once compared the
    # result's own field with itself).
    served = httpx.get(llama_server.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]
    check_result(tmp_path, served)
    assert "c=1" in proc.stdout and "c=2" in proc.stdout


def test_bench_against_nothing_fails_and_says_why(tmp_path):
    proc = run_bench(f"http://127.0.0.1:{free_port()}", tmp_path, "--model", "x", check=False)
    assert proc.returncode != 0
    assert "connect" in (proc.stdout + proc.stderr).lower()


def test_open_loop_keeps_its_schedule_and_reports_it(brisk, tmp_path):
    argv = [str(BRISK_BIN), "bench", "--url", brisk.base_url, "--rate", "2,inf", "--arrival",
            "constant", "--num-requests", "5", "--warmup-requests", "1", "--input-tokens", "16",
            "--output-tokens", "4", "--out", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads((tmp_path / "result.json").read_text())["runs"]
    assert [run["load"] for run in runs] == [{"rate": 2.0}, {"rate": "inf"}]
    paced, burst = runs
    assert paced["requests"]["ok"] == 5 and burst["requests"]["ok"] == 5
    # Constant arrivals at 2/s: sends 0.5 s apart, so the achieved rate is 2/s give or take
    # scheduling noise, and the client never falls far behind its plan.
    assert 1.6 < paced["achieved_rate"] < 2.4
    assert paced["schedule_lag_ms"]["p99"] < 100
    assert burst["achieved_rate"] > 20
    for run in runs:
        assert set(run["schedule_lag_ms"]) >= STAT_KEYS
        assert run["ttft_ms"]["p50"] > 0


def test_cost_and_compare(brisk, tmp_path):
    priced, unpriced = tmp_path / "priced", tmp_path / "unpriced"
    run_bench(brisk.base_url, priced, "--usd-per-hour", "3.6")
    run_bench(brisk.base_url, unpriced)
    for run in json.loads((priced / "result.json").read_text())["runs"]:
        expected = 3.6 / 3600 / run["output_token_throughput"] * 1e6
        assert abs(run["usd_per_million_output_tokens"] - expected) < 1e-6 * expected
        assert run["usd_per_thousand_requests"] > 0
    for run in json.loads((unpriced / "result.json").read_text())["runs"]:
        assert run["usd_per_million_output_tokens"] is None

    # Two different runs (it once compared a file with itself, which any output passes): each
    # printed ratio is B's figure over A's.
    proc = subprocess.run([str(BRISK_BIN), "bench", "--compare", str(priced / "result.json"),
                           str(unpriced / "result.json")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("TTFT p50 ms") == 2  # one block per load point
    a_runs = json.loads((priced / "result.json").read_text())["runs"]
    b_runs = json.loads((unpriced / "result.json").read_text())["runs"]
    blocks = proc.stdout.split("load ")[1:]
    for block, a, b in zip(blocks, a_runs, b_runs, strict=True):
        line = next(l for l in block.splitlines() if l.strip().startswith("E2E p50 ms"))
        printed_a, printed_b, ratio = line.split()[-3:]
        assert float(printed_a) == pytest.approx(a["e2e_ms"]["p50"], abs=0.051)
        assert float(printed_b) == pytest.approx(b["e2e_ms"]["p50"], abs=0.051)
        assert ratio == f"{b['e2e_ms']['p50'] / a['e2e_ms']['p50']:.2f}x"

    bad = subprocess.run([str(BRISK_BIN), "bench", "--compare", str(priced / "requests.csv"),
                          str(priced / "result.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "error" in bad.stderr


def test_slo_goodput_and_max_rate_search(brisk, tmp_path):
    base = [str(BRISK_BIN), "bench", "--url", brisk.base_url, "--num-requests", "4",
            "--warmup-requests", "1", "--input-tokens", "16", "--output-tokens", "4",
            "--search-steps", "2", "--find-max-rate"]
    # A limit nothing can meet: the search ends with no rate, and every run says so.
    proc = subprocess.run(base + ["--slo", "ttft_p50=0.001ms", "--out", str(tmp_path / "strict")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    strict = json.loads((tmp_path / "strict" / "result.json").read_text())
    assert strict["max_rate_meeting_slo"] == 0
    assert strict["slo"] == {"ttft_p50_ms": 0.001}
    assert all(run["slo_met"] is False and run["goodput"] == 0 for run in strict["runs"])
    # A limit everything meets: even the saturating burst passes.
    proc = subprocess.run(base + ["--slo", "e2e_max=600s", "--out", str(tmp_path / "loose")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    loose = json.loads((tmp_path / "loose" / "result.json").read_text())
    assert loose["max_rate_meeting_slo"] == "inf"
    assert loose["runs"][0]["slo_met"] is True
    assert loose["runs"][0]["goodput"] == loose["runs"][0]["request_throughput"]
    bad = subprocess.run(base + ["--slo", "speed_p99=1ms"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown SLO metric" in bad.stderr


def test_max_rate_search_bisects_to_the_rate_a_queue_starts_to_miss_at(tmp_path):
    """A server of known capacity: one 40 ms prefill at a time (the fixture's --prefill-ms),
    shared by every request waiting when it starts. Evenly spaced requests up to 25/s each find
    it idle (TTFT 40 ms); faster, request k waits k x (40 ms - gap) behind the ones before it, so
    TTFT p50 of 40 requests passes 40 + 10 ms once the gap is below 40 - 10 / 19.5 ms. Nothing
    is faster than the model (timers only fire late), so the search must land between the
    capacity less its stated tolerance (burst capacity / 2^steps) and that rate."""
    prefill_ms, margin_ms, requests, steps = 40.0, 10.0, 40, 10
    capacity = 1000 / prefill_ms
    # numpy-linear p50 of 40 TTFTs S + k (S - gap), k = 0..39: S + 19.5 (S - gap).
    misses_above = 1000 / (prefill_ms - margin_ms / ((requests - 1) / 2))
    with scripted_stream_server(["--prefill-ms", str(prefill_ms), "--ttft-ms", "0",
                                 "--itl-ms", "1"]) as url:
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--arrival", "constant",
             "--num-requests", str(requests), "--warmup-requests", "0", "--input-tokens", "16",
             "--output-tokens", "2", "--slo", f"ttft_p50={prefill_ms + margin_ms:g}ms",
             "--find-max-rate", "--search-steps", str(steps), "--progress", "off",
             "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    burst, *probes = result["runs"]
    assert burst["load"]["rate"] == "inf" and burst["slo_met"] is False, burst
    # A batched prefill serves a burst far above the queue's rate: the search has room to bisect.
    burst_capacity = burst["request_throughput"]
    assert burst_capacity > 4 * capacity, burst_capacity
    # Each probe is the middle of the bracket the earlier ones left, for every step.
    assert len(probes) == steps
    meets, misses = 0.0, burst_capacity
    for probe in probes:
        assert probe["load"]["rate"] == pytest.approx((meets + misses) / 2, rel=1e-6), probe
        if probe["slo_met"]:
            meets = probe["load"]["rate"]
        else:
            misses = probe["load"]["rate"]
    assert any(p["slo_met"] for p in probes) and not all(p["slo_met"] for p in probes)
    found = result["max_rate_meeting_slo"]
    assert found == meets
    tolerance = burst_capacity / 2**steps
    assert capacity - tolerance <= found <= misses_above, (found, capacity, tolerance,
                                                            misses_above, proc.stderr)


# --- workloads: length distributions, JSONL test sets, ShareGPT, presets, --duration ---------


def bench_rows(brisk, out_dir, *extra: str) -> tuple[dict, list[dict], subprocess.CompletedProcess]:
    argv = [str(BRISK_BIN), "bench", "--url", brisk.base_url, "--out", str(out_dir), *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out_dir / "result.json").read_text())
    return result, list(csv.DictReader((out_dir / "requests.csv").open())), proc


def server_tokens(brisk, text: str) -> int:
    r = httpx.post(brisk.base_url + "/tokenize", json={"content": text, "add_special": False})
    assert r.status_code == 200, r.text
    return len(r.json()["tokens"])


def test_length_distributions_are_server_tokens_and_follow_the_seed(brisk, tmp_path):
    args = ["--concurrency", "2", "--num-requests", "8", "--warmup-requests", "0",
            "--input-tokens", "uniform:16:64", "--output-tokens", "uniform:2:6"]
    result, rows, _ = bench_rows(brisk, tmp_path / "a", *args, "--seed", "5")
    assert result["workload"]["input_tokens_dist"] == "uniform:16:64"
    assert result["workload"]["input_tokens"] == 40
    prompts = [int(r["prompt_tokens"]) for r in rows]
    outputs = [int(r["completion_tokens"]) for r in rows]
    # Output lengths are exact (max_tokens with ignore_eos); prompt lengths are sized in the
    # server's tokens, to within a couple of tokens of the draw.
    assert all(2 <= n <= 6 for n in outputs) and len(set(outputs)) > 1, outputs
    assert all(14 <= n <= 66 for n in prompts) and len(set(prompts)) > 3, prompts

    _, same_rows, _ = bench_rows(brisk, tmp_path / "b", *args, "--seed", "5")
    _, other_rows, _ = bench_rows(brisk, tmp_path / "c", *args, "--seed", "6")
    by_request = lambda rs: {r["request"]: (r["prompt_tokens"], r["completion_tokens"]) for r in rs}
    assert by_request(same_rows) == by_request(rows)
    assert by_request(other_rows) != by_request(rows)


def test_normal_lengths_center_on_their_mean(brisk, tmp_path):
    _, rows, _ = bench_rows(brisk, tmp_path, "--concurrency", "4", "--num-requests", "16",
                            "--warmup-requests", "0", "--input-tokens", "normal:48:8",
                            "--output-tokens", "normal:4:1")
    prompts = [int(r["prompt_tokens"]) for r in rows]
    assert 40 <= sum(prompts) / len(prompts) <= 56, prompts
    assert len(set(prompts)) > 3


def test_jsonl_test_set_replays_in_order_with_its_own_lengths(brisk, tmp_path):
    dataset = tmp_path / "set.jsonl"
    lines = [{"prompt": "The capital of France is", "max_tokens": 3},
             {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 5},
             {"prompt": "One, two, three,", "max_tokens": 2}]
    dataset.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    common = ["--endpoint", "chat", "--dataset", str(dataset), "--concurrency", "1",
              "--num-requests", "6", "--warmup-requests", "0"]
    result, rows, _ = bench_rows(brisk, tmp_path / "own", *common)
    assert result["workload"]["source"] == "jsonl"
    assert result["workload"]["dataset_entries"] == 3
    # Request i sends line i mod 3: the set repeats in order, with each line's max_tokens.
    assert [int(r["completion_tokens"]) for r in rows] == [3, 5, 2, 3, 5, 2]
    prompt_tokens = [int(r["prompt_tokens"]) for r in rows]
    assert prompt_tokens[:3] == prompt_tokens[3:] and len(set(prompt_tokens)) == 3

    _, overridden, _ = bench_rows(brisk, tmp_path / "override", *common, "--output-tokens", "4")
    assert {int(r["completion_tokens"]) for r in overridden} == {4}


def test_bad_jsonl_line_is_named_and_messages_need_chat(brisk, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"text": "no prompt"}\n')
    proc = subprocess.run([str(BRISK_BIN), "bench", "--url", brisk.base_url, "--dataset",
                           str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "line 2" in proc.stderr, proc.stderr
    chat_only = tmp_path / "chat.jsonl"
    chat_only.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    proc = subprocess.run([str(BRISK_BIN), "bench", "--url", brisk.base_url, "--dataset",
                           str(chat_only)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--endpoint chat" in proc.stderr, proc.stderr


def test_sharegpt_takes_prompts_and_reply_lengths_in_server_tokens(brisk, tmp_path):
    replies = {f"Question {i}: what is {i} plus {i}?": " ".join(["yes"] * (4 + i))
               for i in range(6)}
    conversations = [{"id": str(i), "conversations": [{"from": "human", "value": q},
                                                      {"from": "gpt", "value": a}]}
                     for i, (q, a) in enumerate(replies.items())]
    conversations.append({"id": "orphan", "conversations": [{"from": "gpt", "value": "alone"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    result, rows, _ = bench_rows(brisk, tmp_path / "out", "--sharegpt", str(path),
                                 "--concurrency", "2", "--num-requests", "4",
                                 "--warmup-requests", "0", "--seed", "1")
    assert result["workload"]["source"] == "sharegpt"
    reply_tokens = {server_tokens(brisk, a) for a in replies.values()}
    assert {int(r["completion_tokens"]) for r in rows} <= reply_tokens
    assert len({int(r["completion_tokens"]) for r in rows}) == 4  # 4 different conversations


def test_standard_preset_runs_its_four_cases(brisk, tmp_path):
    result, rows, proc = bench_rows(
        brisk, tmp_path, "--preset", "standard:short=24,long=64,output=3,low=1,peak=3",
        "--num-requests", "3", "--warmup-requests", "1")
    runs = result["runs"]
    assert [run["workload"]["case"] for run in runs] == [
        "short_input_low_concurrency", "short_input_peak_concurrency",
        "long_input_low_concurrency", "long_input_peak_concurrency"]
    assert [run["load"] for run in runs] == [{"concurrency": c} for c in (1, 3, 1, 3)]
    for index, expected_input in enumerate((24, 24, 64, 64)):
        assert runs[index]["requests"]["ok"] == 3
        measured = [r for r in rows if int(r["run"]) == index]
        assert {int(r["prompt_tokens"]) for r in measured} == {expected_input}
        assert {int(r["completion_tokens"]) for r in measured} == {3}
    assert "in=64" in proc.stdout
    html = (tmp_path / "report.html").read_text()
    assert "long_input_peak_concurrency (concurrency 3)" in html


def test_too_short_prompts_are_warned_about(brisk, tmp_path):
    _, rows, proc = bench_rows(brisk, tmp_path, "--num-requests", "1", "--warmup-requests", "0",
                               "--input-tokens", "4", "--output-tokens", "1")
    shortest = int(rows[0]["prompt_tokens"])
    assert shortest > 4
    assert f"prompts cannot be shorter than {shortest} tokens" in proc.stderr


def test_duration_runs_for_its_time_and_reports_progress(brisk, tmp_path):
    result, rows, proc = bench_rows(brisk, tmp_path, "--duration", "2", "--concurrency", "2",
                                    "--input-tokens", "16", "--output-tokens", "2",
                                    "--warmup-requests", "1", "--progress", "lines")
    assert result["workload"]["duration_s"] == 2 and result["workload"]["num_requests"] is None
    assert len(rows) >= 2
    # No request starts after the deadline; those in flight then finish.
    assert all(float(r["scheduled_ms"]) < 2000 for r in rows)
    assert result["runs"][0]["requests"]["ok"] == len(rows)
    assert f"run 0: {len(rows)} requests" in proc.stderr  # the final progress line


def test_concurrency_column_is_requests_in_flight_at_send(brisk, tmp_path):
    _, burst, _ = bench_rows(brisk, tmp_path / "burst", "--rate", "inf", "--num-requests", "4",
                             "--warmup-requests", "0", "--input-tokens", "16",
                             "--output-tokens", "8")
    assert sorted(int(r["concurrency"]) for r in burst) == [1, 2, 3, 4]
    _, capped, _ = bench_rows(brisk, tmp_path / "capped", "--rate", "inf", "--num-requests", "4",
                              "--max-concurrency", "2", "--warmup-requests", "0",
                              "--input-tokens", "16", "--output-tokens", "8")
    assert max(int(r["concurrency"]) for r in capped) == 2


# --- sampling: --temperature, --top-p, --top-k, --min-p, --extra-body ------------------------

SAMPLING_KEYS = {"temperature", "top_p", "top_k", "min_p"}


@pytest.fixture
def scripted_server():
    """tests/fixtures/scripted_stream_server on a fast script; its /script-log shows each body."""
    with scripted_stream_server(["--ttft-ms", "1", "--itl-ms", "1"]) as url:
        yield url


def bench_scripted(url: str, out_dir, *extra: str) -> tuple[dict, list[dict], str]:
    """Runs brisk bench against the fixture; returns result.json's workload, the bodies the
    fixture received (less their prompts) and stderr."""
    argv = [str(BRISK_BIN), "bench", "--url", url, "--concurrency", "2", "--num-requests", "4",
            "--warmup-requests", "1", "--input-tokens", "16", "--output-tokens", "3",
            "--progress", "off", "--out", str(out_dir), *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bodies = [s["request"] for s in httpx.get(url + "/script-log", timeout=10).json()["streams"]]
    assert len(bodies) == 5  # 4 measured + 1 warmup
    workload = json.loads((out_dir / "result.json").read_text())["workload"]
    return workload, bodies, proc.stderr


def test_no_sampling_flag_sends_no_sampling_key(scripted_server, tmp_path):
    workload, bodies, stderr = bench_scripted(scripted_server, tmp_path)
    for body in bodies:
        assert not SAMPLING_KEYS & set(body), body
        assert set(body) == {"model", "max_tokens", "stream", "stream_options", "ignore_eos"}
    assert workload["sampling"] == {} and workload["extra_body"] == {}
    assert "sampling={} (server defaults)" in stderr


def test_sampling_flags_and_extra_body_are_sent_and_recorded(scripted_server, tmp_path):
    extra = {"seed": 7, "ignore_eos": False, "chat_template_kwargs": {"enable_thinking": False}}
    workload, bodies, stderr = bench_scripted(
        scripted_server, tmp_path, "--endpoint", "chat", "--temperature", "0.8", "--top-k", "40",
        "--extra-body", json.dumps(extra))
    for body in bodies:
        assert body["temperature"] == 0.8 and body["top_k"] == 40, body
        assert "top_p" not in body and "min_p" not in body, body
        assert {key: body[key] for key in extra} == extra
        assert body["max_tokens"] == 3 and body["stream"] is True
    assert workload["sampling"] == {"temperature": 0.8, "top_k": 40}
    assert workload["extra_body"] == extra
    header = next(line for line in stderr.splitlines() if line.startswith("brisk bench:"))
    assert 'sampling={"temperature":0.8,"top_k":40}' in header
    assert '"seed":7' in header
    html = (tmp_path / "report.html").read_text()
    assert 'sampling {"temperature":0.8,"top_k":40}, extra body {' in html


def test_dataset_runs_send_and_record_the_sampling_too(scripted_server, tmp_path):
    dataset = tmp_path / "set.jsonl"
    dataset.write_text('{"prompt": "a"}\n{"prompt": "b", "max_tokens": 2}\n')
    workload, bodies, _ = bench_scripted(scripted_server, tmp_path / "out", "--dataset",
                                         str(dataset), "--top-p", "0.5", "--min-p", "0.1")
    assert workload["source"] == "jsonl"
    assert workload["sampling"] == {"top_p": 0.5, "min_p": 0.1}
    assert all(b["top_p"] == 0.5 and b["min_p"] == 0.1 for b in bodies), bodies


def test_brisk_serve_takes_every_sampling_flag(brisk, tmp_path):
    run_bench(brisk.base_url, tmp_path, "--temperature", "0.7", "--top-p", "0.9", "--top-k", "20",
              "--min-p", "0.05", "--extra-body", '{"seed": 3}')
    result = check_result(tmp_path, "gemma3-270m")  # every request succeeded
    assert result["workload"]["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 20,
                                              "min_p": 0.05}
    assert result["workload"]["extra_body"] == {"seed": 3}


@pytest.mark.parametrize("flags, says", [
    (["--extra-body", "{seed: 1}"], "--extra-body is not valid JSON"),
    (["--extra-body", "[1]"], "--extra-body must be a JSON object"),
    (["--extra-body", '{"stream": false}'], "use --no-stream"),
    (["--extra-body", '{"messages": []}'], "--dataset"),
    (["--extra-body", '{"temperature": 0}'], "use --temperature"),
    (["--top-p", "1.5"], "(0, 1]"),
    (["--temperature", "-1"], "--temperature"),
])
def test_bad_sampling_flags_are_cli_errors(flags, says):
    # Checked before anything is sent: no server is needed to hear about it.
    proc = subprocess.run([str(BRISK_BIN), "bench", "--url", f"http://127.0.0.1:{free_port()}",
                           *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert says in proc.stderr, proc.stderr


@pytest.mark.parametrize("models", [
    {"data": [{"id": 5}]},
    {"data": ["gemma"]},
    {"data": {"id": "x"}},
], ids=["id-is-a-number", "entry-is-a-string", "data-is-an-object"])
def test_odd_models_listing_is_an_error_not_an_abort(tmp_path, models):
    # A numeric model id once made brisk bench abort with nlohmann's type_error.
    class Models(QuietHandler):
        def do_GET(self):
            self.send_json(models)

    with python_server(Models) as url:
        result = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--num-requests", "1", "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
    assert result.returncode > 0, (result.returncode, result.stderr)  # < 0: killed by a signal
    assert "/v1/models" in result.stderr and "--model" in result.stderr, result.stderr


def test_a_request_the_server_may_have_received_is_never_sent_again(tmp_path):
    """The server reads the second request whole, then closes the kept-alive connection without
    an answer. It may have served it, so brisk bench must not send it again (it once retried any
    close before an answer): it counts it failed, and since this server closes connections,
    opens a new one for every request after it."""
    received: list[tuple[int, int]] = []  # (connection, request on it), for every request read

    class Server(QuietHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        connections = 0

        def setup(self):
            super().setup()
            self.requests_here = 0

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != "/v1/completions":  # /tokenize: a words ratio sizes the prompts
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.requests_here == 0:  # numbered from their first completion request
                Server.connections += 1
                self.connection_number = Server.connections
            self.requests_here += 1
            received.append((self.connection_number, self.requests_here))
            if len(received) == 2:
                self.close_connection = True  # read, then closed unanswered
                return
            self.send_json({"choices": [{"text": "a b", "finish_reason": "length"}],
                            "usage": {"prompt_tokens": 20, "completion_tokens": 2}})

    with python_server(Server) as url:
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url,
             "--model", "m", "--no-stream", "--concurrency", "1", "--num-requests", "5",
             "--warmup-requests", "0", "--input-tokens", "20", "--output-tokens", "2",
             "--progress", "off", "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert received == [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1)], received
    result = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert result["requests"]["ok"] == 4 and result["requests"]["failed"] == 1, result
    assert result["errors"] == {"disconnected": 1}, result["errors"]
    with open(tmp_path / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    # The first connection opened before the clock started; then one for each request.
    assert [row["new_connection"] for row in rows] == ["0", "0", "1", "1", "1"]
    assert "it is not sent again" in rows[1]["error_detail"], rows[1]


@pytest.mark.parametrize("load", [["--concurrency", "4"], ["--rate", "inf"]],
                         ids=["closed-loop", "burst"])
def test_every_connection_is_open_before_the_clock_starts(scripted_server, tmp_path, load):
    """The warmup used one connection; the other users' (or the burst's) are opened before the
    measured phase too, so no measured request pays for a connection: its first requests leave
    together instead of the warm user's first."""
    proc = subprocess.run(
        [str(BRISK_BIN), "bench", "--url", scripted_server, *load, "--num-requests", "8",
         "--warmup-requests", "1", "--input-tokens", "16", "--output-tokens", "3",
         "--progress", "off", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["requests"]["ok"] == 8, run
    assert run["new_connections"] == 0, run
    with open(tmp_path / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["new_connection"] for row in rows] == ["0"] * 8


def test_a_server_that_sends_no_usage_still_gets_output_throughput_and_a_note(tmp_path):
    with scripted_stream_server(["--ttft-ms", "1", "--itl-ms", "1", "--usage", "0"]) as url:
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--concurrency", "2", "--num-requests", "6",
             "--warmup-requests", "0", "--input-tokens", "16", "--output-tokens", "5",
             "--progress", "off", "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["requests"]["ok"] == 6 and run["requests_without_usage"] == 6, run
    # 5 content chunks a request, counted since usage never came (it was 0 tokens/s).
    assert run["output_token_throughput"] == pytest.approx(30 / run["duration_s"], rel=1e-6)
    assert run["input_token_throughput"] == 0
    assert "reported no usage for 6 of 6 requests" in proc.stderr, proc.stderr


def test_what_no_stream_cannot_measure_is_null_and_an_slo_on_it_is_refused(scripted_server,
                                                                          tmp_path):
    common = [str(BRISK_BIN), "bench", "--url", scripted_server, "--no-stream",
              "--concurrency", "2", "--num-requests", "4", "--warmup-requests", "0",
              "--input-tokens", "16", "--output-tokens", "3", "--progress", "off",
              "--out", str(tmp_path)]
    proc = subprocess.run(common, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["requests"]["ok"] == 4
    for metric in ("ttft_ms", "itl_ms", "tpot_ms"):  # once all 0: "0 ms TTFT"
        assert set(run[metric].values()) == {None}, (metric, run[metric])
    assert run["e2e_ms"]["p50"] > 0

    refused = subprocess.run(common + ["--slo", "ttft_p99=500ms"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "no TTFT" in refused.stderr, refused.stderr


def test_an_itl_limit_on_one_token_outputs_is_not_measured_never_met(scripted_server, tmp_path):
    proc = subprocess.run(
        [str(BRISK_BIN), "bench", "--url", scripted_server, "--num-requests", "4",
         "--warmup-requests", "0", "--input-tokens", "16", "--output-tokens", "1",
         "--slo", "itl_p99=50ms", "--find-max-rate", "--progress", "off", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert [run["slo_met"] for run in result["runs"]] == [False]  # the burst, then it stopped
    assert result["max_rate_meeting_slo"] == 0  # was "inf": an unmeasured limit passed
    assert "itl_p99 not measured" in proc.stderr, proc.stderr


GOOD_STREAM = b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\ndata: [DONE]\n\n'
# One request for each way a request can fail, in order (connect_refused:
# test_bench_against_nothing_fails_and_says_why).
ERROR_SCRIPT = [
    ("ok", 200, GOOD_STREAM),
    ("http_429", 429, b'{"error": {"message": "busy"}}'),
    ("http_4xx", 400, b'{"error": {"message": "bad"}}'),
    ("http_5xx", 503, b'{"error": {"message": "down"}}'),
    ("malformed_sse", 200, b"data: this is not json\n\ndata: [DONE]\n\n"),
    ("malformed_sse", 200, b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'),
    ("stream_error", 200, b'data: {"error": {"message": "oom"}}\n\ndata: [DONE]\n\n'),
    ("disconnected", 200, None),  # half a body, then the connection closes
    ("timeout", 200, "hang"),
    ("ok", 200, GOOD_STREAM),
]


@contextlib.contextmanager
def per_request_script_server(script):
    """A server that answers its n-th completion request with script[n] = (kind, status, body):
    body None sends half of a good stream and closes, "hang" answers nothing for 3 s. Yields its
    URL and the list of the requests it has served."""
    served = []
    lock = threading.Lock()

    class Server(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != "/v1/completions":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with lock:  # open-loop requests arrive on several connections at once
                _, status, body = script[len(served)]
                served.append(self.path)
            if body == "hang":
                time.sleep(3)  # past --timeout
                self.close_connection = True
                return
            self.send_response(status)
            self.send_header("Content-Type",
                             "text/event-stream" if status == 200 else "application/json")
            whole = body if body is not None else GOOD_STREAM
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole if body is not None else whole[:20])
            if body is None:
                self.close_connection = True

    with python_server(Server) as url:
        yield url, served


def kinds_of(script) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind, _, _ in script:
        if kind != "ok":
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_every_error_kind_is_counted_by_its_name(tmp_path):
    """Each failure lands in `errors` under its documented kind, and the good ones stay ok."""
    script = ERROR_SCRIPT
    with per_request_script_server(script) as (url, served):
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--model", "m", "--concurrency", "1",
             "--num-requests", str(len(script)), "--warmup-requests", "0", "--timeout", "1",
             "--input-tokens", "20", "--output-tokens", "1", "--progress", "off",
             "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(served) == len(script)
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["errors"] == kinds_of(script), (run["errors"], proc.stderr)
    assert run["requests"]["ok"] == 2 and run["requests"]["failed"] == len(script) - 2, run
    assert run["requests"]["timeouts"] == 1, run
    with open(tmp_path / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["error"] or "ok" for row in rows] == [kind for kind, _, _ in script], rows


# A good stream whose usage reports "prompt_tokens": null (a count json::value threw on, out of
# an open-loop coroutine that then vanished with its connection, uncounted).
NULL_USAGE_STREAM = (b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
                     b'data: {"choices": [], "usage": {"prompt_tokens": null, '
                     b'"completion_tokens": 1}}\n\ndata: [DONE]\n\n')


@pytest.mark.parametrize("cap", [[], ["--max-concurrency", "2"]],
                         ids=["uncapped", "max-concurrency-2"])
def test_open_loop_counts_every_failure_by_kind_and_never_hangs(tmp_path, cap):
    """Open-loop requests run as coroutines of their own (the closed loop's users do not): each
    failure is still counted under its kind, a usage with "prompt_tokens": null is a good
    request with its completion counted, and with --max-concurrency every connection comes back
    to the pool, so the run ends (two lost connections would leave the third request waiting
    for one forever)."""
    # The null-usage ones early: under the cap, the requests after them need their connections.
    script = ERROR_SCRIPT[:1] + [("ok", 200, NULL_USAGE_STREAM)] * 2 + ERROR_SCRIPT[1:]
    with per_request_script_server(script) as (url, served):
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--model", "m", "--rate", "20",
             "--arrival", "constant", *cap, "--num-requests", str(len(script)),
             "--warmup-requests", "0", "--timeout", "1", "--input-tokens", "20",
             "--output-tokens", "1", "--progress", "off", "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=60)  # a hang fails here
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(served) == len(script)
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["errors"] == kinds_of(script), (run["errors"], proc.stderr)
    ok = sum(kind == "ok" for kind, _, _ in script)
    assert run["requests"] == {"ok": ok, "failed": len(script) - ok, "timeouts": 1}, run
    with open(tmp_path / "requests.csv") as f:
        rows = sorted(csv.DictReader(f), key=lambda row: int(row["request"]))
    # 50 ms apart, the requests reach the server in order: row i met script[i].
    assert [row["error"] or "ok" for row in rows] == [kind for kind, _, _ in script], rows
    # Every request ended (a vanished one had no end), and the null-usage ones are ok with their
    # completion counted.
    assert all(row["end_ms"] != "" for row in rows), rows
    assert [row["completion_tokens"] for row in rows[1:3]] == ["1", "1"], rows[1:3]
    if cap:
        assert max(int(row["concurrency"]) for row in rows) <= 2, rows


def test_api_key_and_a_url_path_prefix_reach_every_route(tmp_path):
    """A gateway-style URL (http://host/some/prefix/) and --api-key: the model listing, the
    tokenizer and every completion go under the prefix, each with the bearer token."""
    seen: list[tuple[str, str, str | None]] = []

    class Server(QuietHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, document):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            if not self.path.startswith("/team/llm/"):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_json(document)

        def do_GET(self):
            self.answer({"object": "list", "data": [{"id": "prefixed-model"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.endswith("/tokenize"):
                self.answer({"tokens": list(range(len(body["content"].split())))})
            else:
                assert body["model"] == "prefixed-model"
                self.answer({"choices": [{"text": "a b", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": 20, "completion_tokens": 2}})

    with python_server(Server) as url:
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url + "/team/llm/", "--api-key", "sk-test",
             "--no-stream", "--concurrency", "1", "--num-requests", "3", "--warmup-requests",
             "1", "--input-tokens", "20", "--output-tokens", "2", "--progress", "off",
             "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["requests"]["ok"] == 3, run
    assert {path for _, path, _ in seen} >= {"/team/llm/v1/models", "/team/llm/tokenize",
                                            "/team/llm/v1/completions"}, seen
    assert all(path.startswith("/team/llm/") for _, path, _ in seen), seen
    assert all(auth == "Bearer sk-test" for _, _, auth in seen), seen
    assert sum(path == "/team/llm/v1/completions" for _, path, _ in seen) == 4  # 1 warmup + 3


@pytest.mark.parametrize("dialect", ["vllm", "llama.cpp", "none"])
def test_prompts_are_sized_with_whichever_tokenize_the_server_speaks(tmp_path, dialect):
    """vLLM and SGLang take {"model", "prompt", "add_special_tokens"} at /tokenize and refuse
    llama.cpp's {"content"} (brisk once spoke only llama.cpp's, and fell back to a words ratio
    against them without a word). The server's tokenizer here is one token per word, plus BOS:
    sized with it, every prompt is exactly the length asked for; result.json says which fields
    were used."""
    bodies = []

    class Server(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                bodies.append(body)
                if dialect == "vllm" and "prompt" in body:
                    assert body["model"] == "m"
                    words = len(body["prompt"].split()) + int(body["add_special_tokens"])
                    return self.send_json({"count": words, "max_model_len": 4096,
                                           "tokens": list(range(words))})
                if dialect == "llama.cpp" and "content" in body:
                    words = len(body["content"].split()) + int(body["add_special"])
                    return self.send_json({"tokens": list(range(words))})
                self.send_response(422 if dialect == "vllm" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            words = len(body["prompt"].split()) + 1
            self.send_json({"choices": [{"text": "a b", "finish_reason": "length"}],
                            "usage": {"prompt_tokens": words, "completion_tokens": 2}})

    with python_server(Server) as url:
        proc = subprocess.run(
            [str(BRISK_BIN), "bench", "--url", url, "--model", "m", "--no-stream",
             "--concurrency", "1", "--num-requests", "4", "--warmup-requests", "0",
             "--input-tokens", "uniform:40:60", "--output-tokens", "2", "--progress", "off",
             "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["workload"]["tokenizer"] == dialect, result["workload"]
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    if dialect == "none":
        assert "assumed: the server has no /tokenize brisk speaks" in proc.stdout + proc.stderr
        return
    assert f"measured via /tokenize, {dialect} fields" in proc.stdout + proc.stderr
    # The lengths asked for, drawn with the seed; exact, since the words ratio was measured.
    drawn = [int(row["prompt_tokens"]) for row in rows]
    assert all(40 <= n <= 60 for n in drawn), drawn
    assert len(set(drawn)) > 1, drawn
