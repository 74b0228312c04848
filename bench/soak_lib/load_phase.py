"""One load phase: N client tasks, each with a fixed role, repeating its behaviour until the
deadline, while a sampler records RSS, descriptors, /metrics and the clients' outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
import traceback
from dataclasses import dataclass

import httpx

from soak_lib import prometheus
from soak_lib.malformed import MalformedLimits, malformed_client
from soak_lib.outcomes import OutcomeLog
from soak_lib.server_process import ServerProcess
from soak_lib.vanishing import VanishLimits, vanishing_client
from soak_lib.well_behaved import well_behaved_request

WELL_BEHAVED, VANISHING, MALFORMED = "well_behaved", "vanishing", "malformed"
ROLES = (WELL_BEHAVED, VANISHING, MALFORMED)


@dataclass
class ClientSettings:
    seed: int
    think_s: dict  # role -> mean pause between one client's actions (exponential, capped at 4x)
    ramp_s: float  # clients start spread over this long, not all in the same millisecond
    hang_after_s: float  # a well-behaved request not finished by then is a hang
    answer_timeout_s: float  # an error answer (or a stream's next event) later than this: a hang
    read_timeout_s: float  # the server's --read-timeout
    stall_margin_s: float  # a stalled client still connected this long after it: not dropped


def assign_roles(streams: int, shares: dict[str, float], seed: int) -> list[str]:
    """Exactly round(share x streams) clients per role (largest remainder), in seeded order."""
    total = sum(shares.values())
    exact = {role: streams * shares.get(role, 0.0) / total for role in ROLES}
    counts = {role: int(exact[role]) for role in ROLES}
    by_remainder = sorted(ROLES, key=lambda r: exact[r] - counts[r], reverse=True)
    for role in by_remainder[:streams - sum(counts.values())]:
        counts[role] += 1
    roles = [role for role in ROLES for _ in range(counts[role])]
    random.Random(seed).shuffle(roles)
    return roles


def think_time(rng: random.Random, mean_s: float) -> float:
    return min(rng.expovariate(1.0 / mean_s), 4 * mean_s) if mean_s > 0 else 0.0


# The clients speak plain HTTP, but httpx builds a TLS context for every client it creates:
# 80 ms of CA loading each, inside the event loop; 1,000 of them stalled all clients for a minute.
SHARED_TLS_CONTEXT = ssl.create_default_context()


def _http_client(role: str, port: int, settings: ClientSettings):
    """One httpx client with one keep-alive connection per well-behaved task, as one application
    instance would hold. With one pool shared by 1,000 tasks, requests in a 1,000-client run took
    40 s to get a connection, by when the server had dropped it as idle (--read-timeout); and one
    task's cancelled request could disturb another's."""
    if role != WELL_BEHAVED:
        return contextlib.nullcontext()
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", verify=SHARED_TLS_CONTEXT,
                             limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                             timeout=httpx.Timeout(settings.hang_after_s))


def _behaviour(role: str, http, rng: random.Random, settings: ClientSettings, port: int,
               log: OutcomeLog):
    """The role's action as a coroutine function returning the seconds to wait after it."""
    if role == WELL_BEHAVED:
        return lambda: well_behaved_request(http, rng, log, settings.hang_after_s,
                                            settings.answer_timeout_s, port)
    if role == VANISHING:
        limits = VanishLimits(port, settings.read_timeout_s, settings.stall_margin_s,
                              settings.answer_timeout_s, settings.hang_after_s)
        return lambda: _no_wait(vanishing_client(limits, rng, log))
    limits = MalformedLimits(port, settings.answer_timeout_s, settings.read_timeout_s,
                             settings.stall_margin_s)
    return lambda: _no_wait(malformed_client(limits, rng, log))


async def _no_wait(action) -> float:
    await action
    return 0.0


async def client_loop(index: int, role: str, deadline: float, settings: ClientSettings,
                      port: int, log: OutcomeLog, stop: asyncio.Event) -> None:
    # Seeded by index alone: in the baseline the same client sends the same requests again.
    rng = random.Random(f"{settings.seed}:{index}")
    await asyncio.sleep(rng.uniform(0, settings.ramp_s))
    async with _http_client(role, port, settings) as http:
        act = _behaviour(role, http, rng, settings, port, log)
        while time.monotonic() < deadline and not stop.is_set():
            wait_s = 0.0
            try:
                wait_s = await act()
            except Exception as e:  # a bug in this client must show, not end the soak
                log.record("client", role, f"exception:{type(e).__name__}",
                           traceback.format_exc(limit=6))
            pause = wait_s + think_time(rng, settings.think_s[role])
            await asyncio.sleep(max(0.0, min(pause, deadline - time.monotonic())))


def _gauges(metrics: dict | None) -> dict:
    """The gauges that must return to 0 when idle, the server's own connection count (1 when
    idle: the scrape that reads it), and the prefix cache's host tier against its --cache-ram."""
    names = {"running": "brisk_requests_running", "waiting": "brisk_requests_waiting",
             "kv_usage_ratio": "brisk_kv_cache_usage_ratio",
             "http_connections": "brisk_http_connections",
             "host_tier_bytes": "brisk_prefix_cache_host_bytes",
             "host_tier_capacity_bytes": "brisk_prefix_cache_host_capacity_bytes"}
    return {key: None if metrics is None else metrics.get(name) for key, name in names.items()}


async def event_loop_lag_ms() -> float:
    """How late a 10 ms sleep wakes: when the clients' own loop is late, their timings are too."""
    loop = asyncio.get_running_loop()
    before = loop.time()
    await asyncio.sleep(0.01)
    return round((loop.time() - before - 0.01) * 1e3, 1)


async def sample_server(server: ServerProcess, log: OutcomeLog, started: float) -> dict:
    fds = server.open_fds()  # counted before the scrape opens a connection of its own
    sample = {"t_s": round(time.monotonic() - started, 2), "alive": server.alive(),
              "rss_kib": server.rss_kib(), "open_fds": fds, "server_cpu_s": server.cpu_s(),
              "client_loop_lag_ms": await event_loop_lag_ms()}
    scrape_started = time.monotonic()
    sample.update(_gauges(await prometheus.scrape(server.port)) if server.alive()
                  else _gauges(None))
    # /metrics waits behind every connection the server has yet to accept and read
    sample["metrics_answer_ms"] = round((time.monotonic() - scrape_started) * 1e3, 1)
    sample.update(log.interval())
    return sample


async def sampler(server: ServerProcess, log: OutcomeLog, every_s: float, started: float,
                  samples: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        samples.append(await sample_server(server, log, started))
        if not server.alive():
            stop.set()  # a crash: nothing left to measure
            return
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


async def run_load_phase(server: ServerProcess, roles: list[str], indexes: list[int],
                         duration_s: float, settings: ClientSettings, sample_every_s: float
                         ) -> tuple[OutcomeLog, list[dict], dict]:
    """Runs the clients `indexes` (with their `roles`) for duration_s; returns their outcomes,
    the samples, and timing facts (when the load stopped, how long in-flight work took)."""
    log = OutcomeLog()
    samples: list[dict] = []
    stop = asyncio.Event()
    started = time.monotonic()
    deadline = started + duration_s
    sampling = asyncio.create_task(sampler(server, log, sample_every_s, started, samples, stop))
    clients = [asyncio.create_task(
        client_loop(i, roles[i], deadline, settings, server.port, log, stop)) for i in indexes]
    await asyncio.gather(*clients)
    load_ended = time.monotonic()
    stop.set()
    await sampling
    samples.append(await sample_server(server, log, started))
    timing = {"planned_s": duration_s, "ran_s": round(load_ended - started, 1),
              "stopped_early_by_crash": not server.alive(),
              "drain_after_deadline_s": round(max(0.0, load_ended - deadline), 1)}
    return log, samples, timing


async def wait_until_idle(server: ServerProcess, fds_before: int, timeout_s: float) -> dict:
    """Polls until no request runs or waits, no KV cell is used and the descriptor count is
    back to fds_before on two polls in a row (a socket the server is closing can lag a moment);
    returns what it saw last."""
    started = time.monotonic()
    streak = 0
    while True:
        fds = server.open_fds()
        gauges = _gauges(await prometheus.scrape(server.port)) if server.alive() else _gauges(None)
        idle = (gauges["running"] == 0 and gauges["waiting"] == 0 and gauges["kv_usage_ratio"] == 0
                and fds == fds_before)
        streak = streak + 1 if idle else 0
        waited_s = time.monotonic() - started
        if streak >= 2 or waited_s > timeout_s or not server.alive():
            return {"reached": streak >= 2, "waited_s": round(waited_s, 1), "open_fds": fds,
                    "fd_kinds": server.fd_kinds(), **gauges}
        await asyncio.sleep(0.5)
