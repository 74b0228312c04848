"""A short soak (issue 13): 150 concurrent clients for 40 s, some well-behaved, some vanishing
mid-queue, mid-prefill, mid-stream or mid-request, some sending malformed requests; then the
goals that must hold on any machine. bench/soak.py runs the long version (make soak) and
records the latency side in BENCHMARKS.md; nothing here depends on how fast this machine is."""

from __future__ import annotations

import sys

import pytest

from conftest import BRISK_BIN, MODEL_NAME, REPO_ROOT, THREADS, model_path, require_file

sys.path.insert(0, str(REPO_ROOT / "bench"))

from soak_lib.soak_run import DEFAULT_SERVER_ARGS, SoakConfig, run_soak  # noqa: E402

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

STREAMS = 150
DURATION_S = 40
# A short --read-timeout lets the stalling clients be dropped within the run. A small queue keeps
# the wait of an admitted request short even on a machine slowed down by other work, so the
# generous hang bound below catches a request that never ends, not a slow machine.
# A host tier far smaller than the default fills within the run: what it must then do is evict.
CACHE_RAM_MIB = 64
SERVER_ARGS = [*DEFAULT_SERVER_ARGS, "--read-timeout", "5", "--max-queued-requests", "16",
               "--threads", str(THREADS), "--cache-ram", str(CACHE_RAM_MIB)]
HANG_AFTER_S = 300


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> dict:
    require_file(BRISK_BIN, "build brisk first (make)")
    require_file(model_path(), f"fetch the model first: {BRISK_BIN} pull {MODEL_NAME}")
    log_path = tmp_path_factory.mktemp("soak") / "brisk-soak.log"
    config = SoakConfig(brisk_bin=BRISK_BIN, log_path=log_path, model=MODEL_NAME,
                        server_args=SERVER_ARGS, streams=STREAMS, duration_s=DURATION_S,
                        baseline_s=0, ramp_s=4, hang_after_s=HANG_AFTER_S, stall_margin_s=15,
                        idle_timeout_s=60)
    result = run_soak(config)
    result["log_path"] = str(log_path)
    return result


def examples(result: dict, role: str | None = None) -> str:
    found = {kind: shown for kind, shown in result["soak"]["violation_examples"].items()
             if role is None or kind.startswith(role + "/")}
    return "\n".join(f"  {kind}: {shown[0][:300]}" for kind, shown in sorted(found.items()))


def test_the_load_reached_the_server(soak):
    """Guards the other tests against passing on a soak that tested nothing."""
    by_role = soak["soak"]["by_role"]
    assert by_role["well_behaved"].get("ok", 0) > 0, by_role["well_behaved"]
    assert sum(by_role["malformed"].values()) >= 50, by_role["malformed"]
    cancelled = soak["server"]["finished_by_reason"].get("cancelled", 0)
    assert cancelled > 0, f"no request was cancelled, so no client vanished: {soak['server']}"


def test_no_crash(soak):
    server = soak["server"]
    assert server["alive_after_soak"], f"brisk serve died during the soak:\n{server['log_tail']}"
    assert server["exit_status_on_sigterm"] == 0, (
        f"exit status {server['exit_status_on_sigterm']} on SIGTERM (None: killed after a hang)\n"
        f"{server['log_tail']}")


def test_no_5xx(soak):
    assert soak["soak"]["http_5xx"] == 0, f"5xx answers:\n{examples(soak)}"


def test_no_request_hangs(soak):
    wb = soak["soak"]["by_role"]["well_behaved"]
    assert wb.get("hang", 0) == 0, (
        f"{wb['hang']} well-behaved requests not finished within {HANG_AFTER_S}s:\n"
        f"{examples(soak, 'well_behaved')}")
    assert soak["soak"]["hangs"] == 0, f"requests or stalled clients left hanging:\n{examples(soak)}"


def test_malformed_requests_get_an_openai_4xx_or_a_clean_close(soak):
    malformed = soak["soak"]["by_variant"]["malformed"]
    bad = examples(soak, "malformed")
    assert not bad, f"malformed requests answered otherwise:\n{bad}"
    assert len(malformed) >= 40, f"only {len(malformed)} kinds of malformed request were sent"


def test_every_client_got_the_answer_its_behaviour_deserves(soak):
    assert soak["soak"]["violations"] == 0, f"unexpected answers:\n{examples(soak)}"


def test_descriptors_back_to_the_start(soak):
    fds = soak["server"]["open_fds"]
    assert fds["after_idle"] == fds["before"], (
        f"open descriptors {fds['before']} before the load, {fds['after_idle']} once idle:\n"
        f"before {fds['kinds_before']}\nafter  {fds['kinds_after_idle']}")


def test_idle_again_with_no_request_or_kv_cell_held(soak):
    idle = soak["idle_after_soak"]
    assert idle["running"] == 0 and idle["waiting"] == 0, idle
    assert idle["kv_usage_ratio"] == 0, f"{idle['kv_cells_in_use']} KV cells still in use: {idle}"


def test_the_host_tier_stays_within_cache_ram(soak):
    host = soak["goals"]["host_tier_within_cache_ram"]
    assert host["capacity_bytes"] == CACHE_RAM_MIB * 2**20, host
    assert soak["server"]["host_tier"]["saves"] > 0, f"nothing was saved: {soak['server']}"
    assert host["met"], f"the host tier held more than --cache-ram: {host}"
