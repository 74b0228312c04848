"""`brisk plan`: the capacity planner, run as a user would, on the real default model."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from conftest import BRISK_BIN, REPO_ROOT, model_path, require_file

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel


def plan(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BRISK_BIN), "plan", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_default_model_is_read_from_its_gguf():
    require_file(model_path(), "run `brisk pull gemma3-270m`")
    proc = plan("--model", "gemma3-270m", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    model = result["model"]
    assert "GGUF metadata" in model["origin"]
    assert (model["layers"], model["kv_heads"], model["head_dim"]) == (18, 1, 256)
    assert model["precision"] == "gguf Q4_K_M"
    # The file's tensors, not parameters x a nominal width: 253 MB on disk.
    assert 0.2 < model["weight_gb"] < 0.3
    devices = {candidate["device"] for candidate in result["candidates"]}
    assert {"h100-sxm", "h200", "a100-80gb", "l4", "t4", "cpu-2vcpu"} <= devices
    for candidate in result["candidates"]:
        assert set(candidate) >= {"device", "count", "fits", "memory_gb", "ttft_ms", "tpot_ms",
                                  "max_concurrency", "usd_per_hour",
                                  "usd_per_million_output_tokens"}
        assert candidate["fits"]  # 0.25 GB fits everywhere
    assert result["recommendation"]["device"] in devices


def test_issue_example_prints_a_ranked_table_and_a_reasoned_recommendation():
    proc = plan("--model", "llama-3.1-8b", "--isl", "1024", "--osl", "256", "--rate", "5",
                "--slo", "ttft_p95=500ms,tpot_p95=50ms", "--explain", "h100-sxm")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Meta Llama 3.1 8B" in out and "5 requests/s" in out
    assert "Recommendation:" in out
    assert "Memory fits:" in out and "bound" in out
    # --explain shows the arithmetic: 128 KiB of KV per token, 16.06 GB of BF16 weights.
    assert "131072 bytes per token" in out
    assert "16.06 GB" in out
    # The 8B model in BF16 never fits a 2-vCPU VM with 8 GB.
    cpu_row = next(line for line in out.splitlines() if line.startswith("cpu-2vcpu"))
    assert " no " in cpu_row


def test_json_memory_breakdown_adds_up_and_tp_shrinks_weights():
    proc = plan("--model", "llama-3.1-70b", "--precision", "bf16", "--devices", "h100-sxm,h200",
                "--concurrency", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for candidate in result["candidates"]:
        memory = candidate["memory_gb"]
        parts = memory["weights"] + memory["kv_cache"] + memory["activations"] + memory["runtime"]
        assert abs(parts - memory["total"]) < 1e-6
        assert memory["total"] <= memory["usable"]
        # 141 GB of BF16 weights need at least two H100s (80 GB) or two H200s (141 GB).
        assert candidate["devices_per_replica"] >= 2
        assert abs(memory["weights"] * candidate["devices_per_replica"] - 141.1) < 0.5


def test_several_models_fit_side_by_side_with_a_device_count_and_a_price():
    require_file(model_path(), "run `brisk pull gemma3-270m`")
    proc = plan("--model", "gemma3-270m", "--model", "llama-3.1-8b", "--model", "qwen2.5-7b",
                "--concurrency", "16", "--devices", "l4,h100-sxm", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [model["model"] for model in result["models"]] == [
        "Gemma 3 270m", "Meta Llama 3.1 8B", "Qwen2.5 7B"]
    fits = {device["device"]: device for device in result["devices"]}
    # One H100 holds the three; an L4 (24 GB) one 8B model in BF16 each.
    assert fits["h100-sxm"]["devices"] == 1 and fits["l4"]["devices"] == 2
    assert sorted(i for device in fits["l4"]["placement"] for i in device) == [0, 1, 2]
    steps = [model["step_ms"] for model in fits["h100-sxm"]["models"]]
    assert abs(fits["h100-sxm"]["shared_itl_ms"] - sum(steps)) < 1e-6
    assert result["recommended"] == "l4"
    text = plan("--model", "gemma3-270m", "--model", "llama-3.1-8b", "--devices", "l4")
    assert text.returncode == 0, text.stderr
    assert "2 models side by side" in text.stdout and "Cheapest: 1 × l4" in text.stdout
    refused = plan("--model", "gemma3-270m", "--model", "llama-3.1-8b", "--rate", "2")
    assert refused.returncode == 2
    assert "--rate plans one model" in refused.stderr


def test_bad_input_gets_a_clear_message():
    cases = [
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--model", "/nonexistent/model.gguf"], "does not exist"),
        (["--model", "llama-3.1-8b", "--devices", "h100-sxm,warp-drive"],
         "unknown device 'warp-drive'"),
        (["--model", "llama-3.1-8b", "--precision", "fp3"], "unknown --precision 'fp3'"),
        (["--model", "llama-3.1-8b", "--slo", "ttft_p95=fast"], "--slo"),
        (["--model", "llama-3.1-8b", "--slo", "itl_p99=5ms"], "predicts ttft and tpot"),
        (["--model", "llama-3.1-8b", "--slo", "e2e_p99=5s"], "use e2e_mean"),
        (["--model", "llama-3.1-8b", "--rate", "2", "--concurrency", "4"], "not both"),
        (["--model", "llama-3.1-8b", "--rate", "2", "--seed", "1"], "go together"),
        (["--model", "llama-3.1-8b", "--concurrency", "2", "--seed", "1", "--num-requests",
          "9"], "go together"),
        ([], "--model is required"),
    ]
    for args, message in cases:
        proc = plan(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    missing = plan("calibrate", "--model", "/nonexistent.gguf", "--device", "cpu-2vcpu")
    assert missing.returncode != 0 and "error" in missing.stderr


def test_impossible_slo_recommends_nothing_and_says_what_to_change():
    proc = plan("--model", "llama-3.1-8b", "--slo", "ttft_p95=1ms", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["recommendation"] is None
    assert all(not candidate["meets_slo"] for candidate in result["candidates"])
    text = plan("--model", "llama-3.1-8b", "--slo", "ttft_p95=1ms").stdout
    assert "No candidate serves this load within the SLO" in text


def test_calibrate_measures_this_machine_and_plan_uses_it(tmp_path):
    require_file(model_path(), "run `brisk pull gemma3-270m`")
    env = {"BRISK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = plan("calibrate", "--model", str(model_path()), "--device", "cpu-2vcpu",
                "--batches", "1,2", "--context", "32", "--repeats", "2", env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The printed median fit error is the stored one (it once printed the sampling cost).
    stored_file = json.loads((tmp_path / "calibration.json").read_text())
    printed = float(proc.stdout.split("median fit error ")[1].split("%")[0])
    assert printed == pytest.approx(stored_file["devices"]["cpu-2vcpu"]["median_abs_error"] * 100,
                                    abs=0.051), proc.stdout
    assert " ns per vocabulary entry" in proc.stdout
    stored = json.loads((tmp_path / "calibration.json").read_text())["devices"]["cpu-2vcpu"]
    # Fractions of the catalog's peaks for a generic 2-vCPU VM. Those peaks are rough (data/
    # hardware.toml says so): on a fast day this VM read 1.06x the catalog's 20 GB/s (CI,
    # 2026-12-02), and brisk plan warns then and keeps every prediction above the physical
    # floor. Far above 1 would mean the model or the fit is wrong; the check once had no upper
    # bound.
    assert 0 < stored["bandwidth_efficiency"] < 1.5 and 0 < stored["compute_efficiency"] < 1.5, \
        stored
    assert len(stored["samples"]) == 3 and all(s["measured_ms"] > 0 for s in stored["samples"])
    result = json.loads(plan("--model", str(model_path()), "--devices", "cpu-2vcpu,h100-sxm",
                             "--json", env=env).stdout)
    origins = {c["device"]: c["efficiency"]["origin"] for c in result["candidates"]}
    assert origins["cpu-2vcpu"].startswith("calibrated on this machine")
    assert origins["h100-sxm"].startswith("default")
    uncalibrated = json.loads(plan("--model", str(model_path()), "--devices", "cpu-2vcpu",
                                   "--json", "--uncalibrated", env=env).stdout)
    assert uncalibrated["candidates"][0]["efficiency"]["origin"].startswith("default")
    # brisk serve's warm-up ran too, with every timed batch: the model's measured steps, which
    # --simulator serve predicts with (brisk serve's own scheduler on them).
    [steps] = stored["measured_steps"].values()
    assert [p["batch"] for p in steps["decode_ms_by_batch"]] == [1, 2]
    assert steps["prefill_ms_per_token"] > 0 and steps["attention_on_gpu"] is False
    served = json.loads(plan("--model", str(model_path()), "--devices", "cpu-2vcpu", "--json",
                             "--concurrency", "4", "--simulator", "serve", env=env).stdout)
    assert "brisk serve's own scheduler" in served["candidates"][0]["efficiency"]["origin"]
    assert "brisk serve's own scheduler" not in origins["cpu-2vcpu"], "the roofline by default"


def test_calibrate_from_a_running_server_stores_what_it_learned(tmp_path, brisk):
    """`--from-server URL`: the step costs a brisk serve learned (its warm-up, then its steps
    under load), read from GET /debug/scheduler, become the model's measured steps."""
    env = {"BRISK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = plan("calibrate", "--from-server", f"http://{brisk.host_port}", "--model",
                str(model_path()), "--device", "cpu-2vcpu", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    learned = httpx.get(f"http://{brisk.host_port}/debug/scheduler").json()["measured"]
    stored = json.loads((tmp_path / "calibration.json").read_text())["devices"]["cpu-2vcpu"]
    [steps] = stored["measured_steps"].values()
    assert steps["decode_ms_by_batch"] == learned["step_costs"]["decode_ms_by_batch"]
    assert steps["prefill_ms_per_token"] == learned["step_costs"]["prefill_ms_per_token"] > 0
    assert stored["origin"].startswith("default"), "no efficiency was fitted: the defaults"
    served = json.loads(plan("--model", str(model_path()), "--devices", "cpu-2vcpu", "--json",
                             "--concurrency", "2", "--simulator", "serve", env=env).stdout)
    assert "brisk serve's own scheduler" in served["candidates"][0]["efficiency"]["origin"]

    refused = plan("calibrate", "--from-server", "http://127.0.0.1:1", "--model",
                   str(model_path()), "--device", "cpu-2vcpu", env=env)
    assert refused.returncode == 2 and "/debug/scheduler" in refused.stderr, refused.stderr


def test_calibrate_fills_a_context_longer_than_one_batch(tmp_path):
    """--context 1100 with 512-token engine batches: the cache is filled in three chunks and
    every decode step is timed at positions 1100 and up (it was once cut to the first 512
    tokens; llama.cpp decodes a sequence's next token only right after its last cached
    position, so a short fill makes the timed steps fail instead of measuring a shorter
    context)."""
    require_file(model_path(), "run `brisk pull gemma3-270m`")
    env = {"BRISK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = plan("calibrate", "--model", str(model_path()), "--device", "cpu-2vcpu",
                "--batches", "1,2", "--context", "1100", "--repeats", "1", env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    samples = json.loads((tmp_path / "calibration.json").read_text())["devices"]["cpu-2vcpu"][
        "samples"]
    decode = [s for s in samples if s["decode_batch"] > 0]
    # Timed at 1100 + repeat for repeat = 1: the mean context of the steps timed.
    assert [(s["decode_batch"], s["context"]) for s in decode] == [(1, 1100.5), (2, 1100.5)]
    assert all(s["measured_ms"] > 0 for s in decode), decode
    # The printed table (batch, context columns) says so too.
    rows = [line.split()[1:3] for line in proc.stdout.splitlines() if ".gguf" in line]
    assert rows[1:] == [["1", "1100"], ["2", "1100"]], proc.stdout


@pytest.mark.parametrize("flag, value, says", [
    ("--repeats", "0", "--repeats: Value 0 not in range 1 to 1000"),
    ("--batches", "1,0", "--batches: Value 0 not in range 1 to 4096"),
    ("--context", "-1", "--context: Value -1 not in range"),
])
def test_calibrate_refuses_out_of_range_flags_before_loading_anything(tmp_path, flag, value,
                                                                      says):
    """--repeats 0 once took the median of no timed steps and fitted log(x / 0). The parser
    refuses it with its own exit status (docs/cli.md), before the model is even looked for."""
    env = {"BRISK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = plan("calibrate", "--model", str(tmp_path / "absent.gguf"), "--device", "cpu-2vcpu",
                flag, value, env=env)
    assert proc.returncode > 1, (proc.returncode, proc.stderr)  # not a failed run, no signal
    assert says in proc.stderr, proc.stderr
    assert "does not exist" not in proc.stderr + proc.stdout
    assert not (tmp_path / "calibration.json").exists()


def test_workload_from_a_bench_result(tmp_path):
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"workload": {"input_tokens": 300.4, "output_tokens": 99},
                                  "runs": [{"load": {"concurrency": 4}}]}))
    out = plan("--model", "llama-3.1-8b", "--workload", str(result), "--json").stdout
    workload = json.loads(out)["workload"]
    assert (workload["input_tokens"], workload["output_tokens"]) == (300, 99)
    assert workload["concurrency"] == 4
    # Flags given on the command line win over the file.
    out = plan("--model", "llama-3.1-8b", "--workload", str(result), "--osl", "7", "--rate", "2",
               "--json").stdout
    workload = json.loads(out)["workload"]
    assert (workload["input_tokens"], workload["output_tokens"], workload["rate"]) == (300, 7, 2)
    bad = plan("--model", "llama-3.1-8b", "--workload", str(tmp_path))
    assert bad.returncode == 2
    assert "is neither a brisk bench result.json nor a request trace" in bad.stderr


def test_workload_from_a_mooncake_trace():
    # The sample's numbers, computed from its own fields: 24 requests from 215 to 5306 ms, mean
    # prompt 1397.2 and output 15.8 tokens, 24349 of 33532 prompt tokens in blocks seen before.
    proc = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm",
                "--workload", str(REPO_ROOT / "data/traces/mooncake_sample.jsonl"), "--json")
    assert proc.returncode == 0, proc.stderr
    workload = json.loads(proc.stdout)["workload"]
    trace = workload["trace"]
    assert trace["file"].endswith("mooncake_sample.jsonl") and trace["format"] == "mooncake"
    assert trace["requests"] == 24
    assert trace["rate_per_s"] == pytest.approx(23 / 5.091)
    assert trace["input_tokens"]["mean"] == pytest.approx(33532 / 24)
    assert trace["input_tokens"]["max"] == 3042
    assert set(trace["input_tokens"]) == {"mean", "p50", "p90", "p99", "max"}
    assert trace["prefix_shared_fraction"] == pytest.approx(24349 / 33532)
    assert trace["used_for"] == ["input_tokens", "output_tokens", "rate", "cached_prompt_tokens"]
    # Planned as an open loop at the trace's rate with its mean lengths; the shared prefixes
    # come from the prefix cache.
    assert (workload["input_tokens"], workload["output_tokens"]) == (1397, 16)
    assert workload["rate"] == pytest.approx(23 / 5.091) and workload["concurrency"] is None
    assert workload["cached_prompt_tokens"] == round(1397 * 24349 / 33532)

    # The same plan without the cache predicts a slower first token.
    cold = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--isl", "1397", "--osl",
                "16", "--rate", str(23 / 5.091), "--json")
    assert cold.returncode == 0, cold.stderr
    warm_ttft = json.loads(proc.stdout)["candidates"][0]["ttft_ms"]["p95"]
    cold_ttft = json.loads(cold.stdout)["candidates"][0]["ttft_ms"]["p95"]
    assert warm_ttft < cold_ttft

    text = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm",
                "--workload", str(REPO_ROOT / "data/traces/mooncake_sample.jsonl"))
    assert text.returncode == 0, text.stderr
    assert "mooncake_sample.jsonl (mooncake): 24 requests" in text.stdout
    assert "73% of prompt tokens" in text.stdout
    assert "from the prefix cache" in text.stdout


def test_workload_from_an_azure_trace_and_flags_win():
    azure = str(REPO_ROOT / "data/traces/azure_sample.csv")
    proc = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--workload", azure,
                "--concurrency", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    workload = json.loads(proc.stdout)["workload"]
    trace = workload["trace"]
    assert trace["format"] == "azure" and trace["requests"] == 24
    # The CSV has no block hashes: the sharing is unknown, and no prompt token is cached.
    assert trace["prefix_shared_fraction"] is None
    assert workload["cached_prompt_tokens"] == 0
    assert trace["rate_per_s"] > 0
    assert trace["used_for"] == ["input_tokens", "output_tokens"]
    assert workload["concurrency"] == 3 and workload["rate"] is None
    assert workload["input_tokens"] == round(trace["input_tokens"]["mean"])
    text = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--workload", azure).stdout
    assert "prefix sharing: unknown" in text


def test_a_bad_trace_is_refused_with_its_file_and_line(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 1, "input_length": 10, "output_length": 2}\n'
                     '{"timestamp": 2, "input_length": "ten", "output_length": 2}\n')
    proc = plan("--model", "llama-3.1-8b", "--workload", str(trace))
    assert proc.returncode == 2
    assert f"{trace}:2:" in proc.stderr and "input_length" in proc.stderr, proc.stderr
    assert "neither a brisk bench result.json nor a request trace" in proc.stderr


def test_a_burst_plan_says_it_is_one_in_json_and_in_its_explanation():
    args = ("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--concurrency", "16", "--burst")
    result = json.loads(plan(*args, "--json").stdout)
    assert result["workload"]["burst"] is True  # documented in docs/plan.md, once missing
    assert json.loads(plan("--model", "llama-3.1-8b", "--devices", "h100-sxm",
                           "--json").stdout)["workload"]["burst"] is False
    explained = plan(*args, "--explain", "h100-sxm").stdout
    assert "simulated step by step" in explained and "M/D/1" not in explained, explained
    assert "every prompt queued at once" in explained, explained


def test_a_poisson_explanation_names_the_simulation_that_made_its_numbers():
    # Poisson percentiles come from the step simulation; the explanation once still claimed an
    # M/D/1 queue and TPOT = step / (1 - share) for them.
    explained = plan("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "2",
                     "--explain", "h100-sxm").stdout
    assert "simulated step by step: 1,500 seeded Poisson arrivals" in explained, explained
    assert "M/D/1" not in explained and "step / (1 -" not in explained, explained


def test_a_poisson_plan_says_where_one_run_can_land():
    # --rate: ten seeded runs of --num-requests (100 without it), the 10th-90th percentile range
    # of each percentile, in the text and in --json; a closed loop has no arrivals to vary.
    args = ("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "8")
    result = json.loads(plan(*args, "--seed", "3", "--num-requests", "120", "--json").stdout)
    spread = result["candidates"][0]["spread"]
    assert spread["runs"] == 10 and spread["requests"] == 120, spread
    for metric in ("ttft_ms", "tpot_ms"):
        for stat in ("p50", "p95", "p99"):
            low, high = spread[metric][stat]
            assert 0 < low <= high, spread
    text = plan(*args).stdout
    assert "Spread: one run of 100 requests" in text, text
    assert json.loads(plan(*args, "--spread-runs", "0", "--json").stdout)[
        "candidates"][0]["spread"] is None
    assert json.loads(plan("--model", "llama-3.1-8b", "--devices", "h100-sxm", "--concurrency",
                           "8", "--json").stdout)["candidates"][0]["spread"] is None
