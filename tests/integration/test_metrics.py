"""/metrics exposes the latency telemetry in Prometheus text format, and it counts right."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from conftest import MODEL_NAME, get_metrics, parse_metrics, stream_sse

HISTOGRAMS = [
    "brisk_time_to_first_token_seconds",
    "brisk_inter_token_latency_seconds",
    "brisk_e2e_request_latency_seconds",
    "brisk_request_queue_time_seconds",
    "brisk_request_prefill_time_seconds",
    "brisk_request_decode_time_seconds",
]
GAUGES = [
    "brisk_requests_running",
    "brisk_requests_waiting",
    "brisk_kv_cache_usage_ratio",
]
E2E_COUNT = "brisk_e2e_request_latency_seconds_count"


def _send_requests(brisk) -> list[dict]:
    """Three requests (two plain, one streamed); returns their usage objects."""
    usages = []
    with brisk.client() as c:
        for prompt in ("Hello there", "The sky is"):
            r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": prompt,
                                                "max_tokens": 6, "ignore_eos": True})
            assert r.status_code == 200, r.text
            usages.append(r.json()["usage"])
        res = stream_sse(c, "/v1/chat/completions",
                         {"model": MODEL_NAME, "max_tokens": 5, "ignore_eos": True, "stream": True,
                          "stream_options": {"include_usage": True},
                          "messages": [{"role": "user", "content": "Hi"}]})
        assert res.status == 200 and res.usage_chunk(), res.raw_lines
        usages.append(res.usage_chunk()["usage"])
    return usages


def _wait_for(brisk, key: str, target: float, timeout_s: float = 3.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        m = get_metrics(brisk)
        if m.get(key, 0) >= target or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def test_metrics_format_and_names(brisk):
    _send_requests(brisk)
    r = httpx.get(brisk.base_url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers.get("content-type", "").startswith("text/plain"), r.headers
    text = r.text
    metrics = parse_metrics(text)
    names = {re.sub(r"\{.*", "", k) for k in metrics}
    for h in HISTOGRAMS:
        assert f"{h}_bucket" in names, f"{h}_bucket missing"
        assert f"{h}_sum" in names and f"{h}_count" in names, f"{h} _sum/_count missing"
        assert re.search(rf"^# TYPE {h} histogram$", text, re.M), f"no '# TYPE {h} histogram'"
        inf = [k for k in metrics if k.startswith(h + "_bucket") and 'le="+Inf"' in k]
        assert inf, f"{h} has no le=\"+Inf\" bucket"
        assert metrics[inf[0]] == metrics[f"{h}_count"], f"{h}: +Inf bucket != _count"
        buckets = sorted(
            (float(re.search(r'le="([^"]+)"', k).group(1).replace("+Inf", "inf")), v)
            for k, v in metrics.items() if k.startswith(h + "_bucket")
        )
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{h} buckets are not cumulative: {buckets}"
    for g in GAUGES:
        assert g in names, f"{g} missing"
    assert 0.0 <= metrics["brisk_kv_cache_usage_ratio"] <= 1.0
    assert "brisk_batch_tokens" in " ".join(names), "brisk_batch_tokens missing"
    for c in ("brisk_prompt_tokens_total", "brisk_generation_tokens_total"):
        assert c in names, f"{c} missing"
    assert metrics[E2E_COUNT] >= 3
    assert metrics["brisk_time_to_first_token_seconds_count"] >= 3
    assert metrics["brisk_inter_token_latency_seconds_count"] >= 3


def test_counters_grow_by_exactly_what_was_sent(brisk):
    before = get_metrics(brisk)
    usages = _send_requests(brisk)
    after = _wait_for(brisk, E2E_COUNT, before.get(E2E_COUNT, 0) + len(usages))
    time.sleep(0.3)
    after = get_metrics(brisk)
    assert after[E2E_COUNT] - before.get(E2E_COUNT, 0) == len(usages)
    assert (after["brisk_time_to_first_token_seconds_count"]
            - before.get("brisk_time_to_first_token_seconds_count", 0)) == len(usages)
    assert (after["brisk_prompt_tokens_total"] - before.get("brisk_prompt_tokens_total", 0)
            == sum(u["prompt_tokens"] for u in usages))
    assert (after["brisk_generation_tokens_total"]
            - before.get("brisk_generation_tokens_total", 0)
            == sum(u["completion_tokens"] for u in usages))
    # each request produced n-1 inter-token gaps
    itl = (after["brisk_inter_token_latency_seconds_count"]
           - before.get("brisk_inter_token_latency_seconds_count", 0))
    assert itl == sum(u["completion_tokens"] - 1 for u in usages)
    assert after["brisk_requests_running"] == 0
    assert after["brisk_requests_waiting"] == 0


def test_errors_are_not_counted_as_served_requests(brisk):
    before = get_metrics(brisk)
    httpx.post(brisk.base_url + "/v1/completions", json={"prompt": ""}, timeout=10)
    httpx.post(brisk.base_url + "/v1/completions", content=b"{bad", timeout=10)
    time.sleep(0.3)
    after = get_metrics(brisk)
    assert after[E2E_COUNT] == before[E2E_COUNT]
