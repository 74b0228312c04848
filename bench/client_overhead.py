#!/usr/bin/env python3
"""Client overhead: the highest open-loop request rate a load generator sustains on ONE core.

Against tests/fixtures/scripted_stream_server (built with the tests, pinned to another core;
every stream: TTFT 10 ms, then --tokens chunks 5 ms apart), each client runs pinned to one core
(`taskset -c 0`) at constant arrivals. A rate is sustained when
  - every request succeeded,
  - the achieved send rate is >= 95% of the target, and
  - schedule lag p99 < 1 ms, both as the client reports it (brisk: schedule_lag_ms; guidellm:
    request_dispatch_delay) and as the fixture saw it (arrival of request i against a constant
    grid i/rate, anchored so the earliest request has lag 0): the same yardstick for every tool.
Rates double until one is not sustained, then bisect. Streamed tokens/s = rate x tokens.

A second, looser yardstick ("keeps pace": same, with lag p99 < 10 ms) is measured too, because
a client that never gets under 1 ms has no ceiling to divide by.

    python3 bench/client_overhead.py [--peer-python /tmp/peer-venv/bin/python] [--repeats 3]

guidellm is not a dependency of this repository: install it into a scratch venv, e.g.
    python3 -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install guidellm==0.8.1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from percentile import percentile  # bench/ is this script's directory

REPO = Path(__file__).resolve().parents[1]


def realtime_prefix() -> list[str]:
    """SCHED_FIFO where allowed (root): on a shared machine another process's work would
    otherwise preempt the client for milliseconds and be counted as its lag. Every tool and
    the fixture get the same treatment."""
    ok = subprocess.run(["chrt", "-f", "10", "true"], capture_output=True).returncode == 0
    return ["chrt", "-f", "10"] if ok else []


RT = realtime_prefix()
BIN = REPO / "build" / "bin"
LAG_LIMITS_MS = {"strict": 1.0, "pace": 10.0}
RUN_SECONDS = 3.0
MIN_REQUESTS = 50


def run_in_group(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Runs argv in a process group of its own and kills the whole group at the end, so no
    worker process (guidellm forks several) outlives its run and skews the next one."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


class Fixture:
    def __init__(self, tokens: int):
        self.proc = subprocess.Popen(
            ["taskset", "-c", "1", *RT, str(BIN / "scripted_stream_server"), "--port", "0",
             "--ttft-ms", "10", "--itl-ms", "5", "--tokens", str(tokens)],
            stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline().split()[-1])}"

    def call(self, path: str, method: str = "GET") -> dict:
        request = urllib.request.Request(self.url + path, method=method,
                                         data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def clear(self):
        self.call("/script-log/clear", "POST")

    def arrival_lag_p99_ms(self, rate: float, count: int) -> float:
        # The last `count` arrivals are the measured requests: warmup ones come first.
        received = sorted(s["received_ns"] / 1e6 for s in self.call("/script-log")["streams"])
        received = received[-count:]
        offsets = [t - i * 1000.0 / rate for i, t in enumerate(received)]
        anchor = min(offsets)
        return percentile([o - anchor for o in offsets], 99)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def run_brisk(fixture: Fixture, rate: float, tokens: int, workdir: Path,
              extra: list[str]) -> dict:
    out = workdir / f"brisk-{rate:g}"
    count = max(MIN_REQUESTS, int(rate * RUN_SECONDS))
    # A spinning client must not be SCHED_FIFO: the kernel throttles real-time tasks after
    # 0.95 s of each second, and a 3 s run would stall for 50 ms every second.
    priority = [] if "--busy-poll" in extra else RT
    argv = ["taskset", "-c", "0", *priority, str(BIN / "brisk"), "bench", "--url", fixture.url,
            "--model", "scripted", "--rate", f"{rate:g}", "--arrival", "constant",
            "--num-requests", str(count), "--warmup-requests", "4", "--input-tokens", "32",
            "--output-tokens", str(tokens), "--progress", "off", "--out", str(out), *extra]
    run_in_group(argv, timeout=600)
    run = json.loads((out / "result.json").read_text())["runs"][0]
    return {"ok": run["requests"]["ok"], "failed": run["requests"]["failed"], "count": count,
            "achieved_rate": run["achieved_rate"], "own_lag_p99_ms": run["schedule_lag_ms"]["p99"],
            "tokens_per_s": run["output_token_throughput"]}


def run_guidellm(fixture: Fixture, rate: float, tokens: int, workdir: Path, python: str) -> dict:
    count = max(MIN_REQUESTS, int(rate * RUN_SECONDS))
    data = workdir / "guidellm-prompts.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"prompt": f"probe {i} hello world"}) + "\n"
                                for i in range(20000)))
    out = workdir / f"guidellm-{rate:g}.json"
    guidellm = str(Path(python).parent / "guidellm")
    argv = ["taskset", "-c", "0", *RT, guidellm, "run",
            "--backend", f"kind=openai_http,target={fixture.url},model=scripted",
            "--profile", f"kind=constant,rate={rate:g}",
            "--constraint", f"kind=max_requests,count={count}",
            "--data", f"kind=json_file,path={data}",
            "--output", f"kind=json,path={out}", "--disable-console"]
    proc = run_in_group(argv, timeout=900)
    if not out.exists():
        raise RuntimeError(f"guidellm wrote no result: {proc.stderr[-2000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    ok = bench["requests"]["successful"]
    failed = len(bench["requests"].get("errored", [])) + len(bench["requests"].get("incomplete", []))
    starts = sorted(r["request_start_time"] for r in ok)
    achieved = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else 0.0
    lags = [r["request_dispatch_delay"] * 1000 for r in ok if r.get("request_dispatch_delay") is not None]
    ends = [r["request_end_time"] for r in ok]
    return {"ok": len(ok), "failed": failed, "count": count, "achieved_rate": achieved,
            "own_lag_p99_ms": percentile(lags, 99),
            "tokens_per_s": len(ok) * tokens / (max(ends) - starts[0]) if ok else 0.0}


def measure(run, fixture: Fixture, rate: float, cache: dict) -> dict:
    if rate in cache:
        return cache[rate]
    fixture.clear()
    result = run(rate)
    result["fixture_lag_p99_ms"] = fixture.arrival_lag_p99_ms(rate, result["count"])
    result["rate"] = rate
    lag = max(result["own_lag_p99_ms"], result["fixture_lag_p99_ms"])
    keeps_rate = (result["failed"] == 0 and result["ok"] >= result["count"]
                  and result["achieved_rate"] >= 0.95 * rate)
    for name, limit in LAG_LIMITS_MS.items():
        result[name] = keeps_rate and lag < limit
    print(f"  rate {rate:8.1f}/s: ok {result['ok']}/{result['count']}, achieved "
          f"{result['achieved_rate']:.1f}/s, lag p99 own {result['own_lag_p99_ms']:.3f} ms, "
          f"at fixture {result['fixture_lag_p99_ms']:.3f} ms -> "
          f"{'<1 ms' if result['strict'] else ('<10 ms' if result['pace'] else 'behind')}",
          flush=True)
    cache[rate] = result
    return result


def ceiling(run, fixture: Fixture, start_rate: float, bisect_steps: int, criterion: str,
            cache: dict) -> float:
    """Highest rate meeting `criterion`: double from start_rate, then bisect."""
    best, rate = 0.0, start_rate
    while measure(run, fixture, rate, cache)[criterion]:
        best, rate = rate, rate * 2
    low, high = best, rate
    for _ in range(bisect_steps):
        middle = (low + high) / 2
        if middle < 1:
            break
        if measure(run, fixture, middle, cache)[criterion]:
            best = low = middle
        else:
            high = middle
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=32, help="chunks per stream")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--bisect-steps", type=int, default=3)
    parser.add_argument("--peer-python", default="/tmp/peer-venv/bin/python",
                        help="python of a venv with guidellm installed (skipped if missing)")
    parser.add_argument("--busy-poll", action="store_true",
                        help="also measure brisk bench --busy-poll")
    parser.add_argument("--brisk-start-rate", type=float, default=500)
    parser.add_argument("--peer-start-rate", type=float, default=8)
    parser.add_argument("--out", help="JSON file for the raw result: every rate measured, per "
                                      "tool and repeat, and the ceilings found")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()}; "
          f"realtime: {'SCHED_FIFO' if RT else 'no'}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    fixture = Fixture(args.tokens)
    tools = {"brisk bench": (lambda r, w: run_brisk(fixture, r, args.tokens, w, []),
                             args.brisk_start_rate)}
    if args.busy_poll:
        tools["brisk --busy-poll"] = (
            lambda r, w: run_brisk(fixture, r, args.tokens, w, ["--busy-poll"]),
            args.brisk_start_rate)
    if Path(args.peer_python).exists():
        tools["guidellm"] = (lambda r, w: run_guidellm(fixture, r, args.tokens, w,
                                                       args.peer_python), args.peer_start_rate)
    ceilings = {tool: {"strict": [], "pace": []} for tool in tools}
    points: list[dict] = []  # every measurement, for --out
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            for repeat in range(args.repeats):
                for tool, (run, start_rate) in tools.items():
                    print(f"{tool} (repeat {repeat}):", flush=True)
                    cache: dict = {}
                    for criterion in ("strict", "pace"):
                        ceilings[tool][criterion].append(ceiling(
                            lambda r: run(r, workdir), fixture, start_rate, args.bisect_steps,
                            criterion, cache))
                    points += [{"tool": tool, "repeat": repeat, **result}
                               for result in cache.values()]
    finally:
        fixture.stop()

    print()
    medians = {}
    for tool, found in ceilings.items():
        for criterion, values in found.items():
            medians[tool, criterion] = statistics.median(values)
            print(f"{tool:18} lag p99 < {LAG_LIMITS_MS[criterion]:g} ms: "
                  f"{medians[tool, criterion]:8.1f} req/s = "
                  f"{medians[tool, criterion] * args.tokens:8.0f} streamed tokens/s "
                  f"(median of {values})")
    if "guidellm" in tools:
        for criterion in ("strict", "pace"):
            peer = medians["guidellm", criterion]
            ratio = (f"{medians['brisk bench', criterion] / peer:.0f}x" if peer > 0
                     else "unbounded: guidellm met it at no tested rate")
            print(f"ratio brisk/guidellm at lag p99 < {LAG_LIMITS_MS[criterion]:g} ms: {ratio}")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "started": started, "argv": sys.argv, "machine": platform.node(),
            "cpus": os.cpu_count(), "realtime": bool(RT), "tokens_per_stream": args.tokens,
            "lag_limits_ms": LAG_LIMITS_MS,
            "ceilings_req_per_s": {tool: {criterion: {"median": medians[tool, criterion],
                                                      "repeats": values}
                                          for criterion, values in found.items()}
                                   for tool, found in ceilings.items()},
            "points": points}, indent=2))
        print(f"raw result: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
