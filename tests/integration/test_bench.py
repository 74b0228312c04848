"""`brisk bench` against real servers: brisk serve and llama-server from the same build."""

from __future__ import annotations

import csv
import json
import subprocess

from conftest import BRISK_BIN, free_port

STAT_KEYS = {"mean", "std", "p50", "p90", "p95", "p99", "max"}


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
        assert run["chunk_token_mismatch"] == len(mismatched) <= len(measured)
    assert {int(r["completion_tokens"]) for r in rows} == {8}
    assert {int(r["prompt_tokens"]) for r in rows} == {32}


def test_bench_against_llama_server(llama_server, tmp_path):
    proc = run_bench(llama_server.base_url, tmp_path)
    models = json.loads((tmp_path / "result.json").read_text())["target"]["model"]
    check_result(tmp_path, models)
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

    proc = subprocess.run([str(BRISK_BIN), "bench", "--compare", str(priced / "result.json"),
                           str(priced / "result.json")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("TTFT p50 ms") == 2  # one block per load point
    assert "1.00x" in proc.stdout

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
