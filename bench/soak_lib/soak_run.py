"""The whole soak: start the server, warm it up, run the mixed load, wait until it is idle,
measure, run the well-behaved clients alone as a baseline, stop the server with SIGTERM."""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from soak_lib import prometheus, report
from soak_lib.load_phase import (WELL_BEHAVED, ClientSettings, assign_roles, run_load_phase,
                                 wait_until_idle)
from soak_lib.server_process import ServerProcess, option_value, raise_open_file_limit

# Requests that send no max_tokens would otherwise reserve the whole context each (docs/cli.md)
# and run until it is full; a small cap makes them end like the rest.
DEFAULT_SERVER_ARGS = ["--override-generation-config", '{"max_tokens": 64}']
# The prefix cache's host tier over the soak: what it saved, restored and evicted (bounded by
# --cache-ram: the evictions are what kept it there).
HOST_TIER_COUNTERS = {"saves": "brisk_prefix_cache_host_saves_total",
                      "restores": "brisk_prefix_cache_host_restores_total",
                      "evictions": "brisk_prefix_cache_host_evictions_total"}
DEFAULT_SHARES = {"well_behaved": 0.5, "vanishing": 0.3, "malformed": 0.2}


@dataclass
class SoakConfig:
    brisk_bin: Path
    log_path: Path
    model: str = "gemma3-270m"
    server_args: list[str] = field(default_factory=lambda: list(DEFAULT_SERVER_ARGS))
    streams: int = 1000
    duration_s: float = 600.0
    baseline_s: float = 120.0  # 0: no baseline phase
    shares: dict = field(default_factory=lambda: dict(DEFAULT_SHARES))
    seed: int = 0
    think_s: dict = field(default_factory=lambda: {role: 1.0 for role in DEFAULT_SHARES})
    ramp_s: float = 10.0
    hang_after_s: float = 600.0
    answer_timeout_s: float = 30.0
    stall_margin_s: float = 15.0
    sample_every_s: float = 2.0
    warmup_fraction: float = 0.1
    idle_timeout_s: float = 60.0

    def client_settings(self) -> ClientSettings:
        read_timeout_s = float(option_value(self.server_args, ("--read-timeout",), "30"))
        return ClientSettings(self.seed, self.think_s, self.ramp_s, self.hang_after_s,
                              self.answer_timeout_s, read_timeout_s, self.stall_margin_s)

    @property
    def ctx_size(self) -> int:
        return int(option_value(self.server_args, ("--ctx-size", "-c"), "8192"))


def machine_info() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               "")
    return {"cpu": cpu, "nproc": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "load_average_at_start": os.getloadavg()}


def binary_info(path: Path) -> dict:
    """Which brisk ran: the binary in a shared build folder can be rebuilt between two runs."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))
    return {"path": str(path), "sha256": digest, "modified": built}


def warm_up(server: ServerProcess) -> None:
    """One streamed and one whole request first: anything the server allocates on its first
    request (threads, buffers, descriptors) is not a leak, so 'before' is counted after this."""
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        for stream in (True, False):
            r = client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 4,
                                                     "stream": stream})
            r.raise_for_status()


def settled_fd_count(server: ServerProcess) -> int:
    """The descriptor count once two reads 0.5 s apart agree (the warm-up's sockets close)."""
    last = server.open_fds()
    for _ in range(40):
        time.sleep(0.5)
        now = server.open_fds()
        if now == last:
            return now
        last = now
    return last


def _idle_report(idle: dict, ctx_size: int) -> dict:
    ratio = idle["kv_usage_ratio"]
    idle["kv_cells_in_use"] = None if ratio is None else round(ratio * ctx_size)
    return idle


async def _measured_phases(config: SoakConfig, server: ServerProcess, fds_before: int) -> dict:
    settings = config.client_settings()
    roles = assign_roles(config.streams, config.shares, config.seed)
    before = await prometheus.scrape(server.port) or {}
    soak_log, soak_samples, soak_timing = await run_load_phase(
        server, roles, list(range(len(roles))), config.duration_s, settings,
        config.sample_every_s)
    alive_after_soak = server.alive()
    idle = (await wait_until_idle(server, fds_before, config.idle_timeout_s)
            if alive_after_soak else {"reached": False, "waited_s": 0, "open_fds": None,
                                      "fd_kinds": {}, "running": None, "waiting": None,
                                      "kv_usage_ratio": None, "http_connections": None})
    after = (await prometheus.scrape(server.port) if alive_after_soak else None) or {}
    out = {"roles": {r: roles.count(r) for r in sorted(set(roles))},
           "soak_log": soak_log, "soak_samples": soak_samples, "soak_timing": soak_timing,
           "alive_after_soak": alive_after_soak,
           "idle_after_soak": _idle_report(idle, config.ctx_size),
           "rss_idle_kib": server.rss_kib(),
           "rejected_by_reason": prometheus.delta(
               prometheus.by_label(after, "brisk_requests_rejected_total", "reason"),
               prometheus.by_label(before, "brisk_requests_rejected_total", "reason")),
           "finished_by_reason": prometheus.delta(
               prometheus.by_label(after, "brisk_requests_finished_total", "finished_reason"),
               prometheus.by_label(before, "brisk_requests_finished_total", "finished_reason")),
           "host_tier": {key: after.get(name, 0) - before.get(name, 0) if after else None
                         for key, name in HOST_TIER_COUNTERS.items()}}
    if config.baseline_s > 0 and server.alive():
        indexes = [i for i, role in enumerate(roles) if role == WELL_BEHAVED]
        out["baseline_log"], out["baseline_samples"], out["baseline_timing"] = \
            await run_load_phase(server, roles, indexes, config.baseline_s, settings,
                                 config.sample_every_s)
        out["idle_after_baseline"] = _idle_report(
            await wait_until_idle(server, fds_before, config.idle_timeout_s), config.ctx_size)
    return out


def run_soak(config: SoakConfig) -> dict:
    client_fd_limit = raise_open_file_limit()
    server = ServerProcess(config.brisk_bin, config.model, config.server_args, config.log_path)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    binary = binary_info(config.brisk_bin)  # before the start: a shared build may be rebuilt
    server.start()
    try:
        warm_up(server)
        fds_before = settled_fd_count(server)
        fd_kinds_before = server.fd_kinds()
        rss_before_kib = server.rss_kib()
        phases = asyncio.run(_measured_phases(config, server, fds_before))
    finally:
        exit_status = server.terminate()
    result = {
        "started_at": started_at,
        "config": {**asdict(config), "brisk_bin": str(config.brisk_bin),
                   "log_path": str(config.log_path)},
        "server_argv": server.argv,
        "brisk_binary": binary,
        "machine": machine_info(),
        "client_fd_limit": client_fd_limit,
        # the clients share the cores with the server: what they took is part of the picture
        "client_cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1),
        "load_average_at_end": os.getloadavg(),
        "roles": phases["roles"],
        "soak": {**report.phase_summary(phases["soak_log"]), "timing": phases["soak_timing"],
                 "sampling": report.sampling_summary(phases["soak_samples"])},
        "idle_after_soak": phases["idle_after_soak"],
        "server": {
            "alive_after_soak": phases["alive_after_soak"],
            "exit_status_on_sigterm": exit_status,
            "rss": {**report.rss_summary(phases["soak_samples"], config.duration_s,
                                         config.warmup_fraction),
                    "before_load_kib": rss_before_kib, "idle_after_soak_kib": phases["rss_idle_kib"]},
            "open_fds": {"before": fds_before, "after_idle": phases["idle_after_soak"]["open_fds"],
                         "kinds_before": fd_kinds_before,
                         "kinds_after_idle": phases["idle_after_soak"]["fd_kinds"]},
            "rejected_by_reason": phases["rejected_by_reason"],
            "finished_by_reason": phases["finished_by_reason"],
            "host_tier": phases["host_tier"],
            "log_tail": server.log_tail(3000) if not phases["alive_after_soak"] or exit_status
            else None,
        },
        "samples": {"soak": phases["soak_samples"]},
    }
    if "baseline_log" in phases:
        result["baseline"] = {**report.phase_summary(phases["baseline_log"]),
                              "timing": phases["baseline_timing"],
                              "sampling": report.sampling_summary(phases["baseline_samples"])}
        result["idle_after_baseline"] = phases["idle_after_baseline"]
        result["samples"]["baseline"] = phases["baseline_samples"]
    result["goals"] = report.goals(result)
    return result
