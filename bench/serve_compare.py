#!/usr/bin/env python3
"""Compares `brisk serve` with llama.cpp's `llama-server` on the same model, threads and context.

Scenarios, run interleaved (brisk, llama-server, brisk, llama-server, ...) --repeats times:
  single      one stream, a 128-token prompt, 256 generated tokens (ignore_eos); decode tokens/s
              measured from the stream = (tokens after the first) / (time first -> last token).
              llama-bench's tg256 (avg_ts) on the same model and threads is printed beside it.
  concurrent  16 simultaneous streams, 128 prompt tokens and 128 generated tokens each; total
              output tokens/s over the whole burst, TTFT and ITL p50/p99.

Both servers get the same requests through /v1/completions with stream: true and
stream_options.include_usage. Prompts are exactly --prompt-tokens long for each server: the
filler text is sized with llama-server's /tokenize and checked against brisk's
usage.prompt_tokens from a max_tokens=1 request; every prompt starts with a distinct request id,
so no prompt reuses another's cached prefix.

Stdlib only. Prints a markdown table of medians and brisk/llama-server ratios; --out writes JSON.

  python3 bench/serve_compare.py --out bench/results/serve_compare.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, asdict
from pathlib import Path

from percentile import percentile  # bench/ is this script's directory

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = REPO_ROOT / "build" / "bin"
FILLER_WORDS = (
    "the quick brown fox jumps over the lazy dog while a small river runs past old stone "
    "houses and children play in the warm evening light near the market square where people "
    "sell bread fruit and flowers to travellers who come from distant towns across the hills"
).split()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


# --- HTTP ----------------------------------------------------------------------------------------


def post_json(port: int, path: str, payload: dict, timeout: float = 300) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@dataclass
class StreamTiming:
    start: float
    token_times: list[float] = field(default_factory=list)  # arrival of each chunk with text
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    end: float = 0.0
    error: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.start if self.token_times else float("nan")

    @property
    def itl_s(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def n_tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else len(self.token_times)

    @property
    def decode_tps(self) -> float:
        span = self.token_times[-1] - self.token_times[0] if len(self.token_times) > 1 else 0
        return (self.n_tokens - 1) / span if span > 0 else float("nan")


def stream_completion(port: int, prompt: str, max_tokens: int, start_gate=None) -> StreamTiming:
    body = json.dumps({
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    })
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    if start_gate is not None:
        start_gate.wait()
    timing = StreamTiming(start=time.perf_counter())
    try:
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            timing.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return timing
        while True:
            line = resp.readline()
            if not line:
                break
            now = time.perf_counter()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    timing.token_times.append(now)
            usage = chunk.get("usage")
            if usage:
                timing.prompt_tokens = usage.get("prompt_tokens")
                timing.completion_tokens = usage.get("completion_tokens")
        timing.end = time.perf_counter()
    except (OSError, http.client.HTTPException, ValueError) as e:
        timing.error = repr(e)
    finally:
        conn.close()
    return timing


# --- servers -------------------------------------------------------------------------------------


@dataclass
class ServerHandle:
    name: str
    port: int
    proc: subprocess.Popen | None
    log_path: str
    argv: list[str]

    def cpu_seconds(self) -> float:
        if self.proc is None:
            return float("nan")
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(name: str, argv: list[str], port: int, ready_path: str, logdir: str) -> ServerHandle:
    log_path = os.path.join(logdir, f"{name}.log")
    log(f"starting {name}: {' '.join(argv)}")
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    handle = ServerHandle(name, port, proc, log_path, argv)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}; log: {log_path}\n"
                             + Path(log_path).read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2) as r:
                if r.status == 200:
                    return handle
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    handle.stop()
    raise SystemExit(f"{name} not ready within 180 s; log: {log_path}")


# --- prompts -------------------------------------------------------------------------------------


def prompt_text(request_id: int, n_words: int) -> str:
    words = [FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(n_words)]
    # A distinct, scrambled id first, so no two prompts share a cached prefix beyond
    # "Request " (104729 is coprime to 10**6, so ids below 10**6 stay distinct). Gemma's
    # tokenizer splits digits, so every 6-digit id costs the same number of tokens.
    scrambled = (request_id * 104729 + 7) % 1_000_000
    return f"Request {scrambled:06d}: " + " ".join(words)


def llama_token_count(port: int, text: str) -> int:
    return len(post_json(port, "/tokenize", {"content": text, "add_special": True})["tokens"])


def brisk_token_count(port: int, text: str) -> int:
    body = post_json(port, "/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0})
    return body["usage"]["prompt_tokens"]


def calibrate_words(count_tokens, target: int) -> int:
    """Number of filler words that makes prompt_text(id, words) exactly `target` tokens."""
    calib_id = 999999  # never used by a measured request
    lo, hi = 1, target * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(prompt_text(calib_id, mid)) < target:
            lo = mid + 1
        else:
            hi = mid
    n = count_tokens(prompt_text(calib_id, lo))
    if n != target:
        raise SystemExit(f"cannot build a {target}-token prompt from the filler (got {n})")
    return lo


# --- scenarios -----------------------------------------------------------------------------------


def run_single(port: int, words: int, request_id: int, gen_tokens: int) -> dict:
    t = stream_completion(port, prompt_text(request_id, words), gen_tokens)
    if t.error:
        raise SystemExit(f"single-stream request failed: {t.error}")
    return {
        "decode_tps": t.decode_tps,
        "ttft_ms": t.ttft_s * 1000,
        "e2e_s": t.end - t.start,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "chunks": len(t.token_times),
    }


def run_concurrent(port: int, words: int, first_id: int, streams: int, gen_tokens: int) -> dict:
    gate = threading.Barrier(streams)
    results: list[StreamTiming | None] = [None] * streams

    def worker(i: int) -> None:
        results[i] = stream_completion(port, prompt_text(first_id + i, words), gen_tokens, gate)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"{len(errors)} concurrent requests failed, first: {errors[0]}")
    start = min(r.start for r in results)
    end = max(r.end for r in results)
    total_tokens = sum(r.n_tokens for r in results)
    ttft = [r.ttft_s * 1000 for r in results]
    itl = [x * 1000 for r in results for x in r.itl_s]
    return {
        "total_output_tps": total_tokens / (end - start),
        "wall_s": end - start,
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "itl_p50_ms": percentile(itl, 50),
        "itl_p99_ms": percentile(itl, 99),
        "prompt_tokens": sorted({r.prompt_tokens for r in results}, key=str),
        "completion_tokens": total_tokens,
    }


def run_llama_bench(binary: Path, model: Path, threads: int, gen_tokens: int) -> float | None:
    if not binary.exists():
        log(f"{binary} not found; skipping llama-bench")
        return None
    argv = [str(binary), "-m", str(model), "-p", "0", "-n", str(gen_tokens), "-t", str(threads),
            "-o", "json"]
    log(f"running {' '.join(argv)}")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        log(f"llama-bench failed: {p.stderr[-2000:]}")
        return None
    rows = json.loads(p.stdout)
    return float(rows[0]["avg_ts"])


# --- main ----------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--llama-bench-bin", type=Path, default=BIN_DIR / "llama-bench")
    ap.add_argument("--model", default="gemma3-270m", help="model name for brisk")
    ap.add_argument("--model-path", type=Path, default=home / "models" / "gemma-3-270m-q4_k_m.gguf",
                    help="GGUF file for llama-server and llama-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=8192,
                    help="context for both servers; llama-server splits it over its 16 slots")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--single-tokens", type=int, default=256)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--concurrent-tokens", type=int, default=128)
    ap.add_argument("--servers", default="brisk,llama-server",
                    help="comma-separated subset of brisk,llama-server")
    ap.add_argument("--no-llama-bench", action="store_true")
    ap.add_argument("--brisk-args", default="", help="extra flags for brisk serve")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    return ap.parse_args()


def machine_info() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "nproc": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def write_runs(path: Path | None, runs: list[dict]) -> None:
    """A benchmark's raw result: the machine, the command, the date and every run."""
    if not path:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine_info(), "argv": sys.argv,
                                "date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=2))


def main() -> int:
    args = parse_args()
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not args.model_path.exists():
        raise SystemExit(f"model file {args.model_path} not found (run: build/bin/brisk pull "
                         f"{args.model})")
    logdir = tempfile.mkdtemp(prefix="serve_compare-")
    servers: dict[str, ServerHandle] = {}
    try:
        if "brisk" in names:
            port = free_port()
            servers["brisk"] = start_server("brisk", [
                str(args.brisk_bin), "serve", "--model", args.model, "--host", "127.0.0.1",
                "--port", str(port), "--threads", str(args.threads),
                "--ctx-size", str(args.ctx_size), "--max-seqs", str(args.streams),
                *args.brisk_args.split(),
            ], port, "/ready", logdir)
        if "llama-server" in names:
            port = free_port()
            servers["llama-server"] = start_server("llama-server", [
                str(args.llama_server_bin), "-m", str(args.model_path), "--host", "127.0.0.1",
                "--port", str(port), "-t", str(args.threads), "-c", str(args.ctx_size),
                "-np", str(args.streams), "--cont-batching",
            ], port, "/health", logdir)
        if not servers:
            raise SystemExit("no servers selected")

        # Size the filler so each server sees exactly --prompt-tokens tokens.
        words: dict[str, int] = {}
        if "llama-server" in servers:
            words["llama-server"] = calibrate_words(
                lambda t: llama_token_count(servers["llama-server"].port, t), args.prompt_tokens)
        if "brisk" in servers:
            n_words = words.get("llama-server")
            bport = servers["brisk"].port
            if n_words is None or brisk_token_count(bport, prompt_text(999999, n_words)) \
                    != args.prompt_tokens:
                n_words = calibrate_words(lambda t: brisk_token_count(bport, t), args.prompt_tokens)
            words["brisk"] = n_words
        log(f"filler words per prompt: {words}")

        for name, s in servers.items():  # warm-up
            stream_completion(s.port, prompt_text(999998, 8), 8)

        runs: dict[str, dict[str, list[dict]]] = {n: {"single": [], "concurrent": []}
                                                  for n in servers}
        idle_cpu: dict[str, list[float]] = {n: [] for n in servers}
        request_id = 0
        for rep in range(args.repeats):
            for scenario in ("single", "concurrent"):
                for name, s in servers.items():
                    others = [o for o in servers.values() if o is not s]
                    cpu0 = [o.cpu_seconds() for o in others]
                    t0 = time.perf_counter()
                    if scenario == "single":
                        request_id += 1
                        r = run_single(s.port, words[name], request_id, args.single_tokens)
                        log(f"[{rep + 1}/{args.repeats}] {name:12s} single: "
                            f"{r['decode_tps']:.1f} tok/s decode, TTFT {r['ttft_ms']:.0f} ms")
                    else:
                        r = run_concurrent(s.port, words[name], request_id + 1, args.streams,
                                           args.concurrent_tokens)
                        request_id += args.streams
                        log(f"[{rep + 1}/{args.repeats}] {name:12s} concurrent: "
                            f"{r['total_output_tps']:.1f} tok/s total, TTFT p50 "
                            f"{r['ttft_p50_ms']:.0f} ms p99 {r['ttft_p99_ms']:.0f} ms, ITL p50 "
                            f"{r['itl_p50_ms']:.1f} ms p99 {r['itl_p99_ms']:.1f} ms")
                    wall = time.perf_counter() - t0
                    for o, c0 in zip(others, cpu0):
                        idle_cpu[o.name].append((o.cpu_seconds() - c0) / wall)
                    runs[name][scenario].append(r)

        llama_bench_tps = None
        if not args.no_llama_bench:
            llama_bench_tps = run_llama_bench(args.llama_bench_bin, args.model_path, args.threads,
                                              args.single_tokens)
    finally:
        for s in servers.values():
            s.stop()

    metrics = [
        ("single", "decode_tps", f"single stream decode tok/s ({args.prompt_tokens} in, "
                                 f"{args.single_tokens} out)", True),
        ("single", "ttft_ms", "single stream TTFT ms", False),
        ("concurrent", "total_output_tps", f"{args.streams} streams total output tok/s "
                                           f"({args.prompt_tokens} in, "
                                           f"{args.concurrent_tokens} out)", True),
        ("concurrent", "ttft_p50_ms", f"{args.streams} streams TTFT p50 ms", False),
        ("concurrent", "ttft_p99_ms", f"{args.streams} streams TTFT p99 ms", False),
        ("concurrent", "itl_p50_ms", f"{args.streams} streams ITL p50 ms", False),
        ("concurrent", "itl_p99_ms", f"{args.streams} streams ITL p99 ms", False),
    ]
    medians = {n: {key: median([r[key] for r in runs[n][sc]]) for sc, key, _, _ in metrics}
               for n in servers}

    header = "| metric | " + " | ".join(servers) + (" | brisk / llama-server |"
                                                     if len(servers) == 2 else "")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for sc, key, label, higher_better in metrics:
        vals = [medians[n][key] for n in servers]
        row = f"| {label} | " + " | ".join(f"{v:.1f}" for v in vals)
        if len(servers) == 2:
            ratio = medians["brisk"][key] / medians["llama-server"][key]
            row += f" | {ratio:.2f}{' (higher is better)' if higher_better else ''}"
        lines.append(row + " |")
    if llama_bench_tps is not None:
        lines.append("")
        lines.append(f"llama-bench tg{args.single_tokens} (no server, same model and threads): "
                     f"{llama_bench_tps:.1f} tok/s; single-stream decode as a fraction of it: "
                     + ", ".join(f"{n} {medians[n]['decode_tps'] / llama_bench_tps:.2f}"
                                 for n in servers))
    table = "\n".join(lines)
    print(table)
    for n in servers:
        bad = [r["prompt_tokens"] for r in runs[n]["single"] if r["prompt_tokens"] != args.prompt_tokens]
        bad += [r["prompt_tokens"] for r in runs[n]["concurrent"]
                if r["prompt_tokens"] != [args.prompt_tokens]]
        if bad:
            print(f"\nwarning: {n} reported prompt_tokens {bad}, not {args.prompt_tokens}")
        if idle_cpu[n] and max(idle_cpu[n]) > 0.05:
            print(f"\nwarning: {n} used {max(idle_cpu[n]):.0%} of a core while idle during the "
                  f"other server's runs")

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "machine": machine_info(),
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "commands": {n: s.argv for n, s in servers.items()},
            "filler_words": words,
            "medians": medians,
            "llama_bench_tg_tps": llama_bench_tps,
            "idle_cpu_fraction": idle_cpu,
            "runs": runs,
            "table_markdown": table,
        }, indent=2))
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
