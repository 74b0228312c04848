"""Scheduling on the real model: KV is counted as used, so requests without max_tokens run side
by side, and a cache that runs out preempts and recomputes instead of failing anyone."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import (MODEL_NAME, _start_brisk, _stop_and_check_clean_exit, get_metrics,
                      sse_lines)

MSGS = [{"role": "user", "content": "Tell me about the sea."}]


def test_chats_without_max_tokens_run_side_by_side(brisk):
    """The openai SDK's default sends no max_tokens. Each such request used to reserve the whole
    context, so four ran one at a time (brisk_requests_running stayed at 1, 3 waiting)."""
    n = 4
    first_token = [threading.Event() for _ in range(n)]
    release = threading.Event()
    errors: list[str] = []

    def stream(i: int) -> None:
        body = {"model": MODEL_NAME, "messages": MSGS, "stream": True, "temperature": 0,
                "ignore_eos": True}
        try:
            with httpx.Client(base_url=brisk.base_url, timeout=120) as c:
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.read()!r}")
                        return
                    for line in sse_lines(r):
                        if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                            first_token[i].set()
                        if release.is_set():
                            return  # hang up: the server cancels the rest
        except httpx.HTTPError as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    try:
        all_streaming = all(e.wait(60) for e in first_token)
        metrics = get_metrics(brisk)
    finally:
        release.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert all_streaming, f"only {sum(e.is_set() for e in first_token)} of {n} streams started"
    assert metrics["brisk_requests_running"] >= n, metrics
    deadline = time.monotonic() + 30
    while get_metrics(brisk)["brisk_requests_running"] > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get_metrics(brisk)["brisk_requests_running"] == 0


@pytest.fixture(scope="module")
def brisk_small_cache(tmp_path_factory):
    """KV for 256 tokens shared by 4 sequences: three 120-token requests cannot all fit."""
    server = _start_brisk(tmp_path_factory, "brisk-small-cache", ["--max-seqs", "4"],
                          api_key=None, ctx_size=256)
    yield server
    _stop_and_check_clean_exit(server)


def test_cache_running_out_preempts_and_every_request_finishes(brisk_small_cache):
    """Exactness of the resumed streams (no token repeated or lost) is tested on a fake model in
    tests/unit/step_scheduler_test.cpp; on the real one a recomputed cache may round differently
    from the one built token by token, so greedy texts may drift after a preemption."""
    prompts = [f"Story number {i}: once upon a time there was a" for i in range(3)]
    n_tokens = 110

    def one(prompt: str) -> dict:
        with brisk_small_cache.client(timeout=300) as c:
            r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n_tokens,
                                                "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            return r.json()

    before = get_metrics(brisk_small_cache)
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        together = list(pool.map(one, prompts))
    after = get_metrics(brisk_small_cache)
    assert after["brisk_preemptions_total"] > before["brisk_preemptions_total"], after
    for b in together:
        assert b["usage"]["completion_tokens"] == n_tokens, b
        assert b["choices"][0]["finish_reason"] == "length", b
    assert after["brisk_requests_running"] == 0 and after["brisk_requests_waiting"] == 0
    assert after["brisk_kv_cache_usage_ratio"] == 0
    assert after.get('brisk_requests_finished_total{finished_reason="error"}', 0) == 0


@pytest.fixture(scope="module")
def brisk_short_delay(tmp_path_factory):
    """One sequence and a 300 ms limit on the estimated wait before a prompt starts."""
    server = _start_brisk(tmp_path_factory, "brisk-short-delay",
                          ["--max-seqs", "1", "--max-queue-delay-ms", "300"], api_key=None)
    yield server
    _stop_and_check_clean_exit(server)


def test_a_request_that_would_wait_too_long_is_refused_at_once(brisk_short_delay):
    """SLO-aware admission: while one long request holds the only sequence, a newcomer whose
    estimated wait passes --max-queue-delay-ms gets 429 queue_delay at once, with a Retry-After
    from the estimate, instead of waiting."""
    server = brisk_short_delay
    with server.client(timeout=120) as c:
        # Let the server measure its step costs and the length requests run to.
        r = c.post("/v1/completions", json={"prompt": "warm up " * 60, "max_tokens": 120,
                                            "ignore_eos": True})
        assert r.status_code == 200, r.text
    streaming = threading.Event()

    def busy_request() -> int:
        body = {"prompt": "Tell me a story.", "max_tokens": 120, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body,
                          timeout=120) as r:
            for line in sse_lines(r):
                if line.startswith("data: {"):
                    streaming.set()
            return r.status_code

    with ThreadPoolExecutor(max_workers=1) as pool:
        busy = pool.submit(busy_request)
        assert streaming.wait(30), "the busy request never streamed"
        t0 = time.monotonic()
        r = httpx.post(server.base_url + "/v1/completions", timeout=30,
                       json={"prompt": "And another one.", "max_tokens": 4})
        answered_s = time.monotonic() - t0
        assert busy.result() == 200
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "queue_delay" and "--max-queue-delay-ms" in error["message"], error
    assert int(r.headers["Retry-After"]) >= 1, r.headers
    assert answered_s < 1.0, f"the refusal took {answered_s:.2f} s"
    key = 'brisk_requests_rejected_total{reason="queue_delay"}'
    assert get_metrics(server)[key] >= 1


@pytest.fixture(scope="module")
def brisk_priority(tmp_path_factory):
    """One sequence, --policy priority. No --max-queue-delay-ms: these tests are about the
    order of the queue, and a 150-token stream's estimate crossed 30 s on CI while another
    server's threads took the cores (each step priced at the warm-up's and its own step times)."""
    server = _start_brisk(tmp_path_factory, "brisk-priority",
                          ["--max-seqs", "1", "--policy", "priority", "--max-queue-delay-ms", "0"],
                          api_key=None)
    yield server
    _stop_and_check_clean_exit(server)


def _stream_in_background(server, body: dict, headers: dict | None = None):
    """Starts a streaming completion; returns (started event, future of (status, tokens, end))."""
    started = threading.Event()

    def run() -> tuple[int, int, float]:
        tokens = 0
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body,
                          headers=headers or {}, timeout=120) as r:
            for line in sse_lines(r):
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
                    started.set()
            return r.status_code, tokens, time.monotonic()

    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(run)
    pool.shutdown(wait=False)
    return started, future


def test_a_higher_priority_request_goes_first_and_the_preempted_one_still_finishes(
        brisk_priority):
    """--policy priority: with the only sequence taken by a priority-5 stream, a priority-0
    request (the X-Request-Priority header) preempts it and finishes before a priority-5 request
    that arrived earlier; the preempted stream resumes and is delivered whole."""
    server = brisk_priority
    base = {"max_tokens": 150, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    before = get_metrics(server)
    started, running = _stream_in_background(
        server, {**base, "prompt": "A long story:", "priority": 5})
    assert started.wait(60), "the first stream never started"
    low = _stream_in_background(server, {**base, "prompt": "Low:", "max_tokens": 20,
                                         "priority": 5})[1]
    time.sleep(0.3)
    high = _stream_in_background(server, {**base, "prompt": "High:", "max_tokens": 20},
                                 headers={"X-Request-Priority": "0"})[1]
    results = {name: f.result(timeout=120) for name, f in
               (("running", running), ("low", low), ("high", high))}
    assert all(status == 200 for status, _, _ in results.values()), results
    assert results["running"][1] == 150 and results["low"][1] == 20 and results["high"][1] == 20
    assert results["high"][2] < results["low"][2], "the priority-0 request waited for the 5s"
    assert results["high"][2] < results["running"][2], "it waited for the running one"
    assert get_metrics(server)["brisk_preemptions_total"] > before["brisk_preemptions_total"]


def test_a_request_past_its_deadline_is_dropped_with_408(brisk_priority):
    server = brisk_priority
    # 60 tokens outlast the 300 ms deadline on any machine, and stay under the 30 s queue-delay
    # limit on a slow one: behind 150 tokens at 200 ms a step, the newcomer was refused (429).
    started, running = _stream_in_background(
        server, {"prompt": "Busy:", "max_tokens": 60, "ignore_eos": True, "stream": True})
    assert started.wait(60)
    t0 = time.monotonic()
    r = httpx.post(server.base_url + "/v1/completions", timeout=60,
                   json={"prompt": "Too late?", "max_tokens": 4, "deadline_ms": 300})
    waited_s = time.monotonic() - t0
    assert running.result(timeout=120)[0] == 200
    assert r.status_code == 408, r.text
    error = r.json()["error"]
    assert error["code"] == "deadline_exceeded" and "deadline" in error["message"], error
    assert waited_s < 5, f"answered after {waited_s:.1f} s, not at its deadline"
    assert get_metrics(server)['brisk_requests_finished_total{finished_reason="deadline"}'] >= 1


@pytest.mark.parametrize("body,headers,param", [
    ({"priority": "high"}, {}, "priority"),
    ({"priority": 10**7}, {}, "priority"),
    ({}, {"X-Request-Priority": "urgent"}, "priority"),
    ({"deadline_ms": -5}, {}, "deadline_ms"),
    ({"deadline_ms": "soon"}, {}, "deadline_ms"),
])
def test_bad_scheduling_fields_get_a_400_naming_them(brisk, body, headers, param):
    r = httpx.post(brisk.base_url + "/v1/completions", timeout=30, headers=headers,
                   json={"prompt": "Hi", "max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_debug_scheduler_shows_the_queue_the_running_set_and_the_kv_map(brisk_priority):
    """GET /debug/scheduler (what brisk doctor reads): with the only sequence streaming, a second
    request waits for a free sequence, says so itself, and /metrics says so too."""
    server = brisk_priority
    started, running = _stream_in_background(
        server, {"prompt": "Busy:", "max_tokens": 120, "ignore_eos": True, "stream": True,
                 "priority": 2})
    assert started.wait(60)
    waiting = _stream_in_background(server, {"prompt": "Me next", "max_tokens": 2,
                                             "stream": True, "priority": 2})[1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        snapshot = httpx.get(server.base_url + "/debug/scheduler", timeout=10).json()
        # Submitted during a step, a request is not_yet_considered until the next one starts.
        if (snapshot["waiting_total"] == 1
                and snapshot["waiting"][0]["waiting_reason"] != "not_yet_considered"):
            break
        time.sleep(0.05)
    metrics = get_metrics(server)
    assert running.result(timeout=120)[0] == 200 and waiting.result(timeout=120)[0] == 200
    assert snapshot["policy"] == "priority" and snapshot["limits"]["max_seqs"] == 1
    assert snapshot["waiting_total"] == 1, snapshot
    assert snapshot["waiting"][0]["prompt_tokens"] > 0 and snapshot["waiting"][0]["priority"] == 2
    assert len(snapshot["running"]) == 1 and snapshot["running"][0]["phase"] == "decode", snapshot
    assert snapshot["admission_blocked"] == "no_free_sequence", snapshot
    assert snapshot["waiting"][0]["waiting_reason"] == "no_free_sequence", snapshot
    kv = snapshot["kv"]
    assert kv["running_cells"] >= snapshot["running"][0]["kv_cells"] > 0, kv
    assert kv["capacity_cells"] == kv["used_cells"] + (kv["capacity_cells"] - kv["used_cells"])
    assert metrics['brisk_requests_waiting_by_reason{reason="no_free_sequence"}'] == 1, metrics
    assert (metrics['brisk_kv_cache_cells{state="running"}']
            + metrics['brisk_kv_cache_cells{state="cached"}']
            + metrics['brisk_kv_cache_cells{state="free"}']) == kv["capacity_cells"]


def _stream_gaps_while_a_long_prompt_prefills(server) -> tuple[float, float, float]:
    """One stream decodes; once it has 8 tokens a ~2,000-token prompt arrives. Returns the
    stream's longest gap between tokens while that prompt was prefilled, a like prompt's prefill
    alone (brisk_timings, with nothing else running) and its prefill beside the stream."""
    def long_prompt(tag: str) -> str:  # ~2,000 tokens, sharing no prefix with another tag's
        return " ".join(f"{tag}x{i % 97}" for i in range(400))

    # Warm-up: the step costs the scheduler sizes chunks from, and the long prompt alone.
    with server.client(timeout=300) as c:
        r = c.post("/v1/completions", json={"prompt": "warm up " * 40, "max_tokens": 16,
                                            "ignore_eos": True})
        assert r.status_code == 200, r.text
        r = c.post("/v1/completions", json={"prompt": long_prompt("alone"), "max_tokens": 1})
        assert r.status_code == 200, r.text
        alone_ms = r.json()["brisk_timings"]["prefill_ms"]
    arrivals: list[float] = []
    eight = threading.Event()

    def stream() -> None:
        body = {"prompt": "Tell me a long story.", "max_tokens": 400, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body,
                          timeout=300) as r:
            for line in sse_lines(r):
                if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                    arrivals.append(time.monotonic())
                    if len(arrivals) == 8:
                        eight.set()

    with ThreadPoolExecutor(max_workers=1) as pool:
        streaming = pool.submit(stream)
        assert eight.wait(60), "the stream never started"
        sent = time.monotonic()
        with server.client(timeout=300) as c:
            r = c.post("/v1/completions", json={"prompt": long_prompt("beside"),
                                                "max_tokens": 1})
        done = time.monotonic()
        assert r.status_code == 200, r.text
        beside_ms = r.json()["brisk_timings"]["prefill_ms"]
        streaming.result()
    during = [b - a for a, b in zip(arrivals, arrivals[1:]) if b > sent and a < done]
    assert during, "the stream sent nothing while the long prompt was prefilled"
    return max(during) * 1000, alone_ms, beside_ms


def test_a_long_prompt_does_not_stall_running_streams(tmp_path_factory):
    """The defaults (--target-itl-ms 150, --long-prefill-tokens 256) cut a long prompt into
    chunks between the running streams' steps: a stream's longest gap is about one step, not
    the whole prefill. Measured on the 2-vCPU VM (shared with builds): longest gaps of 268 and
    1,988 ms while the prompt took 5.5 and 21.4 s beside the stream; with --target-itl-ms 0
    --long-prefill-tokens 0 --max-batched-tokens 4096 the gap was the whole prefill (5.9 s of
    5.9 s) and this test failed. The bound is against the prefill measured at the same time,
    so a machine slowed by other work slows both."""
    server = _start_brisk(tmp_path_factory, "brisk-stall", [], api_key=None)
    try:
        longest_gap_ms, alone_ms, beside_ms = _stream_gaps_while_a_long_prompt_prefills(server)
    finally:
        _stop_and_check_clean_exit(server)
    print(f"longest gap {longest_gap_ms:.0f} ms; the long prompt's prefill {alone_ms:.0f} ms "
          f"alone, {beside_ms:.0f} ms beside the stream")
    assert longest_gap_ms < 0.3 * beside_ms, (longest_gap_ms, beside_ms)
