"""`brisk tune`: the search on a server of known capacity through --server-cmd (the scripted
stream server: with evenly spaced arrivals it serves 1000/prefill-ms requests per second within a
TTFT limit), Ctrl-C leaving no server behind, bad templates, and one real short tune of brisk
serve on SmolLM2 within its budget.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import BRISK_BIN, SCRIPTED_STREAM_SERVER_BIN, SECOND_MODEL_NAME, THREADS


def processes_with(marker: str) -> list[int]:
    """Process ids whose command line contains `marker` (zombies and ourselves aside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and "pytest" not in cmdline:
            found.append(int(entry.name))
    return found


def scripted_server_cmd(marker: str) -> str:
    return (f"{SCRIPTED_STREAM_SERVER_BIN} --port {{port}} --ttft-ms 0 --prefill-ms {{prefill}} "
            f"--itl-ms {{itl}} --marker {marker}")


def tune(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BRISK_BIN), "tune", "--progress", "off", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_the_search_finds_the_fast_setting_of_a_server_of_known_capacity(tmp_path):
    marker = uuid.uuid4().hex
    started = time.monotonic()
    proc = tune("--server-cmd", scripted_server_cmd(marker), "--grid", "prefill=100,400,20",
                "--grid", "itl=5,40", "--slo", "ttft_max=150ms,tpot_max=20ms", "--budget", "90s",
                "--requests-per-run", 8, "--input-tokens", 16, "--output-tokens", 4,
                "--arrival", "constant", "--out", tmp_path)
    elapsed_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["baseline"]["setting"] == {"prefill": "100", "itl": "5"}
    assert report["best"]["setting"] == {"prefill": "20", "itl": "5"}, proc.stderr
    # prefill 100 ms, evenly spaced arrivals: 10 requests/s each find the server idle.
    assert 6 <= report["baseline"]["goodput_rps"] <= 14, proc.stderr
    by_change = {c["change"]: c for c in report["candidates"]}
    for loser in ("prefill=400", "prefill=20 itl=40"):
        assert by_change[loser]["goodput_rps"] == 0, proc.stderr
        assert by_change[loser]["measurements"][0]["gave_up"], proc.stderr
        assert len(by_change[loser]["measurements"][0]["trials"]) == 1  # one run to lose
    # prefill=400 queues 8 requests for 3.2 s; its miss is certain once one waited 150 ms.
    overloaded = by_change["prefill=400"]["measurements"][0]["trials"][0]
    assert overloaded["abandoned"] and "over ttft_max 150 ms" in overloaded["abandoned"], overloaded
    assert overloaded["duration_s"] < 1.5, overloaded
    assert overloaded["misses"] == ["abandoned: " + overloaded["abandoned"]], overloaded
    assert report["best"]["command"].endswith(f"--prefill-ms 20 --itl-ms 5 --marker {marker}")
    assert "{port}" in report["best"]["command"]
    assert any("prefill 20 (was 100)" in line for line in report["why"]), report["why"]
    assert report["elapsed_s"] <= 90 + 15 and elapsed_s <= 90 + 30
    assert "| 1 | prefill=20 |" in (tmp_path / "report.md").read_text()
    assert processes_with(marker) == []


def test_ctrl_c_stops_the_candidate_server_and_tune_exits(tmp_path):
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [str(BRISK_BIN), "tune", "--progress", "off", "--server-cmd", scripted_server_cmd(marker),
         "--grid", "prefill=100,50", "--grid", "itl=5", "--slo", "ttft_p99=150ms",
         "--budget", "10m", "--input-tokens", "16", "--output-tokens", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(marker), "the candidate server never started"
        time.sleep(0.5)  # mid-measurement
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 128 + signal.SIGINT
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


@pytest.mark.parallel
@pytest.mark.parametrize("args, message", [
    (["--server-cmd", "llama-server -np {slots}", "--grid", "slots=1,2"], "has no {port}"),
    (["--server-cmd", "srv --port {port} -np {slots}"], "{slots} has no values"),
    (["--server-cmd", "srv --port {port} -np {slots}", "--grid", "slots=8..2"], "not a range"),
    (["--server-cmd", "srv --port {port} -np {slots}", "--grid", "batch=2"], "has no {batch}"),
    (["--server-cmd", "srv --port {port} 'open"], "unclosed single quote"),
    (["--base-flags", "--max-seqs 4", "--server-cmd", "srv --port {port}"], "give one"),
    (["--budget", "20x"], "is not a duration"),
    (["--base-flags", "--port 8080"], "drop them"),
    # An embedding model (found from its GGUF): its answers have no first token.
    (["--model", "all-minilm-l6-v2"], "limit e2e"),
    (["--model", "all-minilm-l6-v2", "--output-tokens", "8"], "drop --output-tokens"),
    (["--inputs-per-request", "4"], "--inputs-per-request is for embeddings"),
    # A p99 of fewer than 100 requests is the slowest one's latency.
    (["--requests-per-run", "24"], "--requests-per-run 24 cannot resolve ttft_p99"),
])
def test_bad_flags_are_refused_with_what_to_change(args, message):
    proc = tune("--slo", "ttft_p99=1s", *args, timeout=30)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


@pytest.mark.parallel
def test_every_verb_takes_durations_as_users_write_them():
    bad = subprocess.run([str(BRISK_BIN), "doctor", "--budget", "1h30"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode != 0 and "a unit is missing" in bad.stderr, bad.stderr
    # Parsed, then refused for the unreachable URL: the duration itself was fine.
    good = subprocess.run([str(BRISK_BIN), "bench", "--url", "http://127.0.0.1:1", "--duration",
                           "1m30s", "--timeout", "500ms", "--progress", "off"],
                          capture_output=True, text=True, timeout=30)
    assert "duration" not in good.stderr, good.stderr


def test_a_real_short_tune_of_brisk_serve_stays_within_its_budget(tmp_path):
    marker = "tune-" + uuid.uuid4().hex[:12]
    started = time.monotonic()
    trace = tmp_path / "trace.jsonl"
    proc = tune("--model", SECOND_MODEL_NAME, "--slo", "ttft_max=4s",
                "--base-flags", f"--served-model-name {marker} --threads {THREADS} --ctx-size 2048 "
                f"--trace-out {trace}",
                "--budget", "40s", "--requests-per-run", 6, "--input-tokens", 32,
                "--output-tokens", 8, "--emit", "k8s", "--out", tmp_path)
    elapsed_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    baseline = report["baseline"]
    assert baseline["measurements"] and baseline["measurements"][0]["trials"], proc.stderr
    trial = baseline["measurements"][0]["trials"][0]
    assert trial["ok"] >= 4 and trial["failed"] == 0, trial
    assert baseline["command"].startswith(f"brisk serve --model {SECOND_MODEL_NAME} "
                                          f"--served-model-name {marker}")
    assert "--max-seqs 16" in baseline["command"]  # brisk serve's default, said explicitly
    assert baseline["peak_memory_bytes"] > 50e6  # the model is resident
    assert baseline["predicted_goodput_rps"] > 0  # brisk plan predicted it
    assert report["prediction"]["origin"].startswith("cpu-2vcpu")
    names = [knob["name"] for knob in report["knobs"]]
    assert {"max-seqs", "max-batched-tokens", "target-itl-ms", "kv-layout"} <= set(names)
    # A hard cap: a run in progress may finish, nothing starts after it.
    assert report["elapsed_s"] <= 40 + 30 and elapsed_s <= 40 + 45, proc.stderr
    # Every trial sends prompts of its own: a prefix cache must not serve a repeated trial.
    # (Each candidate's server rewrites the trace: the last one's requests are there.)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    first_blocks = [r["hash_ids"][0] for r in records if r["hash_ids"]]
    assert len(records) >= 6 and len(set(first_blocks)) == len(first_blocks), first_blocks
    # The winner as a Deployment: its flags, in the pod's model path and port.
    manifests = (tmp_path / "k8s.yaml").read_text()
    assert "# brisk tune --emit k8s" in manifests
    assert "/models/SmolLM2-135M-Instruct.Q4_1.gguf" in manifests
    assert marker in manifests and "kind: HorizontalPodAutoscaler" in manifests
    best_flags = report["best"]["command"].split()
    assert best_flags[best_flags.index("--max-seqs") + 1] in manifests
    assert processes_with(marker) == []


def test_a_real_short_tune_of_an_embedding_models_batcher(tmp_path):
    marker = "tune-emb-" + uuid.uuid4().hex[:12]
    started = time.monotonic()
    # A loose SLO: the test machine runs other tests beside this one, and the point here is that
    # a real embeddings tune measures its batcher's knobs and reports them, not which one wins.
    proc = tune("--model", "all-minilm-l6-v2", "--slo", "e2e_max=3s",
                "--base-flags", f"--served-model-name {marker} --threads {THREADS}",
                "--budget", "40s", "--requests-per-run", 8, "--input-tokens", 200,
                "--inputs-per-request", 2, "--out", tmp_path)
    elapsed_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["endpoint"] == "embeddings"  # --endpoint auto, from the GGUF's pooling type
    assert [knob["name"] for knob in report["knobs"]][:3] == [
        "batch-window-ms", "max-batch-inputs", "max-batch-tokens"]
    assert report["prediction"] is None  # brisk plan does not model the batcher
    baseline = report["baseline"]
    assert "--batch-window-ms 0" in baseline["command"] and "--max-seqs" not in baseline["command"]
    trials = [t for m in baseline["measurements"] for t in m["trials"]]
    served = [t for t in trials if t["ok"] >= 4 and t["failed"] == 0]
    assert served, proc.stderr
    assert served[0]["embeddings_per_s"] > 0 and served[0]["e2e_p99_ms"] > 0, served[0]
    assert report["workload"]["endpoint"] == "embeddings", report["workload"]
    assert "E2E p99 ms" in (tmp_path / "report.md").read_text()
    assert report["elapsed_s"] <= 40 + 30 and elapsed_s <= 40 + 45, proc.stderr
    assert processes_with(marker) == []


def test_verify_measures_each_prescription_of_a_doctor_report(tmp_path):
    marker = "verify-" + uuid.uuid4().hex[:12]
    doctor_report = tmp_path / "doctor" / "report.json"
    doctor_report.parent.mkdir()
    doctor_report.write_text(json.dumps({"findings": [
        {"id": "queueing", "serve_flags": ["--max-seqs", "4"]},
        {"id": "network_overhead", "serve_flags": []}]}))
    # An SLO every run meets: each configuration's runs are short.
    proc = tune("--model", SECOND_MODEL_NAME, "--slo", "e2e_max=120s", "--verify", doctor_report,
                "--base-flags",
                f"--served-model-name {marker} --threads {THREADS} --ctx-size 2048 --max-seqs 2",
                "--budget", "60s", "--requests-per-run", 4, "--input-tokens", 16,
                "--output-tokens", 4, "--out", tmp_path / "tune")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "tune" / "report.json").read_text())
    assert [knob["name"] for knob in report["knobs"]] == ["prescription"]
    by_change = {c["change"]: c for c in report["candidates"]}
    assert set(by_change) == {"(baseline)", "prescription=queueing"}, by_change.keys()
    verified = by_change["prescription=queueing"]
    assert verified["measurements"] and verified["measurements"][0]["trials"], proc.stderr
    # The prescription's flag replaces the base's (brisk serve refuses a flag given twice).
    assert verified["command"].count("--max-seqs") == 1 and "--max-seqs 4" in verified["command"]
    assert "--max-seqs 2" in report["baseline"]["command"]
    assert verified["predicted_goodput_rps"] is not None
    assert all(trial["meets_slo"] for trial in verified["measurements"][0]["trials"])
    assert processes_with(marker) == []
