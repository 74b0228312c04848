"""Turns a soak's raw facts into the figures of issue 13 and says which goals were met."""

from __future__ import annotations

from percentile import percentile as shared_percentile
from soak_lib.outcomes import OutcomeLog

RSS_TOLERANCE = 0.05
HANG_OUTCOMES = ("hang", "no_answer_head", "no_answer", "not_dropped", "no_event")
CONNECTION_LIMIT = ":too_many_connections"


def is_server_error(outcome: str) -> bool:
    """A 5xx, or an error event inside a stream; a 503 at --max-connections is the server
    refusing load it has no room for (like a 429), counted apart."""
    if outcome.endswith(CONNECTION_LIMIT):
        return False
    return outcome.startswith("http_5") or outcome == "error_event"


def percentile(values: list[float], q: float) -> float | None:
    """bench/percentile.py's, rounded to 0.1 ms; None when there are none."""
    return round(shared_percentile(values, q), 1) if values else None


def latency_summary(log: OutcomeLog) -> dict:
    return {"served_with_content": len(log.ttft_ms),
            "ttft_ms": {f"p{q}": percentile(log.ttft_ms, q) for q in (50, 90, 99, 100)},
            "e2e_ms": {f"p{q}": percentile(log.e2e_ms, q) for q in (50, 90, 99, 100)}}


def sampling_summary(samples: list[dict]) -> dict:
    """How trustworthy the timings are: the clients' own event-loop lag, and how long the
    server took to answer /metrics under the load."""
    def worst(key):
        values = [s[key] for s in samples if s.get(key) is not None]
        return max(values) if values else None
    return {"samples": len(samples), "client_loop_lag_ms_max": worst("client_loop_lag_ms"),
            "metrics_answer_ms_max": worst("metrics_answer_ms"),
            "open_fds_max": worst("open_fds"), "http_connections_max": worst("http_connections"),
            "host_tier_bytes_max": worst("host_tier_bytes"),
            "host_tier_capacity_bytes": worst("host_tier_capacity_bytes")}


def count_matching(log: OutcomeLog, predicate) -> int:
    return sum(n for (_r, _v, outcome), n in log.counts.items() if predicate(outcome))


def phase_summary(log: OutcomeLog) -> dict:
    return {
        "actions": sum(log.counts.values()),
        "by_role": {role: log.by_outcome(role) for role in sorted({r for r, _, _ in log.counts})},
        "by_variant": log.nested_counts(),
        "http_5xx": count_matching(log, is_server_error),
        "connection_limit_refusals": count_matching(log, lambda o: o.endswith(CONNECTION_LIMIT)),
        "hangs": count_matching(log, lambda o: o in HANG_OUTCOMES),
        "connection_resets_seen": count_matching(log, lambda o: "reset" in o),
        "violations": log.violation_total(),
        "violation_examples": log.examples,
        **latency_summary(log),
    }


def rss_summary(samples: list[dict], duration_s: float, warmup_fraction: float) -> dict:
    during = [s for s in samples if s["rss_kib"] and s["t_s"] <= duration_s]
    warm = next((s for s in during if s["t_s"] >= warmup_fraction * duration_s), None)
    end = during[-1] if during else None
    if warm is None or end is None:
        return {"after_warmup_kib": None, "end_kib": None, "change": None, "met": False}
    change = end["rss_kib"] / warm["rss_kib"] - 1

    # A leak is growth nothing accounts for: the prefix cache's host tier grows by design up to
    # --cache-ram (a goal of its own), so the goal judges the RSS less the bytes it holds.
    def less_host_tier(sample):
        return sample["rss_kib"] - (sample.get("host_tier_bytes") or 0) / 1024
    change_less_host_tier = less_host_tier(end) / less_host_tier(warm) - 1
    return {"after_warmup_kib": warm["rss_kib"], "after_warmup_t_s": warm["t_s"],
            "end_kib": end["rss_kib"], "end_t_s": end["t_s"],
            "max_kib": max(s["rss_kib"] for s in during), "change": round(change, 4),
            "change_less_host_tier": round(change_less_host_tier, 4),
            "met": abs(change_less_host_tier) <= RSS_TOLERANCE}


def goals(result: dict) -> dict:
    soak = result["soak"]
    server = result["server"]
    idle = result["idle_after_soak"]
    fds = server["open_fds"]
    return {
        "no_crash": {"alive_after_soak": server["alive_after_soak"],
                     "exit_status_on_sigterm": server["exit_status_on_sigterm"],
                     "met": server["alive_after_soak"] and server["exit_status_on_sigterm"] == 0},
        "no_5xx": {"count": soak["http_5xx"], "met": soak["http_5xx"] == 0},
        "no_hang": {"count": soak["hangs"], "met": soak["hangs"] == 0},
        "every_answer_as_expected": {"violations": soak["violations"],
                                     "met": soak["violations"] == 0},
        "fds_back_to_start": {"before": fds["before"], "after_idle": fds["after_idle"],
                              "met": fds["before"] == fds["after_idle"]},
        "idle_again": {"reached": idle["reached"], "running": idle["running"],
                       "waiting": idle["waiting"], "kv_cells_in_use": idle["kv_cells_in_use"],
                       "met": idle["running"] == 0 and idle["waiting"] == 0
                       and idle["kv_usage_ratio"] == 0},
        "rss_flat_within_5_percent": {"change": server["rss"]["change"],
                                      "met": server["rss"]["met"]},
        "host_tier_within_cache_ram": _host_tier_goal(soak["sampling"]),
    }


def _host_tier_goal(sampling: dict) -> dict:
    """The prefix cache's host tier never held more than its --cache-ram (sampled gauges)."""
    held, capacity = sampling.get("host_tier_bytes_max"), sampling.get("host_tier_capacity_bytes")
    return {"max_bytes": held, "capacity_bytes": capacity,
            "met": held is not None and capacity is not None and held <= capacity}


def _fmt(value, unit: str = "") -> str:
    return "–" if value is None else f"{value}{unit}"


def figures_table(result: dict) -> str:
    """The figures as a markdown table (what BENCHMARKS.md records)."""
    soak, base, server = result["soak"], result.get("baseline"), result["server"]
    idle, g = result["idle_after_soak"], result["goals"]
    wb = soak["by_role"].get("well_behaved", {})
    rss = server["rss"]

    def mark(name):
        return "met" if g[name]["met"] else "**missed**"

    rows = [
        ("client actions (all roles)", soak["actions"], ""),
        ("well-behaved: served OK / 429 / hangs",
         f"{wb.get('ok', 0) + wb.get('ok_without_content', 0)} / "
         f"{sum(v for k, v in wb.items() if k.startswith('http_429:'))} / "
         f"{wb.get('hang', 0) + wb.get('no_answer_head', 0)}", ""),
        ("503 at --max-connections (all roles)", soak["connection_limit_refusals"], ""),
        ("server: finished by reason", _kv(server["finished_by_reason"]), ""),
        ("server: rejected by reason", _kv(server["rejected_by_reason"]), ""),
        ("5xx (other than at --max-connections)", soak["http_5xx"], mark("no_5xx")),
        ("hangs (all roles)", soak["hangs"], mark("no_hang")),
        ("answers not as expected", soak["violations"], mark("every_answer_as_expected")),
        ("crashes (alive after soak; exit status on SIGTERM)",
         f"{0 if g['no_crash']['met'] else 1} ({server['alive_after_soak']}; "
         f"{server['exit_status_on_sigterm']})", mark("no_crash")),
        ("RSS after warm-up → end (MiB)",
         f"{_mib(rss['after_warmup_kib'])} → {_mib(rss['end_kib'])} "
         f"({_pct(rss['change'])}; less the host tier's bytes: "
         f"{_pct(rss.get('change_less_host_tier'))})", mark("rss_flat_within_5_percent")),
        ("open fds before → after, idle", f"{server['open_fds']['before']} → "
                                          f"{server['open_fds']['after_idle']}",
         mark("fds_back_to_start")),
        ("idle again: running / waiting / KV cells",
         f"{idle['running']} / {idle['waiting']} / {idle['kv_cells_in_use']} "
         f"(after {idle['waited_s']} s)", mark("idle_again")),
        ("TTFT p50 / p99 ms, soak", f"{_fmt(soak['ttft_ms']['p50'])} / "
                                    f"{_fmt(soak['ttft_ms']['p99'])} (n={soak['served_with_content']})",
         ""),
    ]
    rows.append(("slowest well-behaved request, s", _fmt(_s(soak["e2e_ms"]["p100"])), ""))
    sampling = soak["sampling"]
    host = g["host_tier_within_cache_ram"]
    rows.append(("host tier: most held / --cache-ram (MiB); saves, restores, evictions",
                 f"{_mib_bytes(host['max_bytes'])} / {_mib_bytes(host['capacity_bytes'])}; "
                 f"{_int(server.get('host_tier', {}).get('saves'))}, "
                 f"{_int(server.get('host_tier', {}).get('restores'))}, "
                 f"{_int(server.get('host_tier', {}).get('evictions'))}",
                 mark("host_tier_within_cache_ram")))
    rows.append(("most open fds / connections during the load",
                 f"{sampling['open_fds_max']} / {_fmt(sampling['http_connections_max'])}", ""))
    rows.append(("client event-loop lag max / slowest /metrics answer, ms",
                 f"{sampling['client_loop_lag_ms_max']} / {sampling['metrics_answer_ms_max']}", ""))
    if base:
        rows.append(("TTFT p50 / p99 ms, well-behaved alone",
                     f"{_fmt(base['ttft_ms']['p50'])} / {_fmt(base['ttft_ms']['p99'])} "
                     f"(n={base['served_with_content']})", ""))
    lines = ["| figure | value | goal |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {goal} |" for name, value, goal in rows]
    return "\n".join(lines)


def _kv(counts: dict) -> str:
    return ", ".join(f"{k} {int(v)}" for k, v in counts.items()) or "none"


def _s(ms):
    return None if ms is None else round(ms / 1000, 1)


def _mib(kib) -> str:
    return "–" if kib is None else f"{kib / 1024:.0f}"


def _pct(change) -> str:
    return "–" if change is None else f"{change * 100:+.1f}%"


def _mib_bytes(value) -> str:
    return "–" if value is None else f"{value / 2**20:.0f}"


def _int(value) -> str:
    return "–" if value is None else str(int(value))
