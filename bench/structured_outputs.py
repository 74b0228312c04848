#!/usr/bin/env python3
"""Structured outputs side by side (issue 24): 16 streams asking for a JSON schema (an object of
4 typed fields), brisk serve constrained vs brisk serve unconstrained vs llama-server constrained,
on the same model file; and the first-token latency of a request with a schema never seen before
against one with a schema already compiled.

Each round runs, in turn (interleaved, so a noisy machine hits every configuration alike):
  - brisk free:    16 streams, each --requests chat requests back to back, no response_format,
                   max_tokens = --free-tokens (about a schema answer's length: the tiny models
                   otherwise talk to the end of the context);
  - brisk schema:  the same with response_format json_schema, no max_tokens (the grammar ends
                   every answer);
  - llama schema:  the same against llama-server (-np 16).
No sampling parameters are sent: each server draws with its own defaults (brisk: temperature 1
over the full distribution, OpenAI's; llama-server: its top-k/top-p/min-p at 0.8).
Output tok/s = completion tokens / wall time of the wave. Then the first-token latency (streamed,
time to the first chunk with text) of --ttft-probes requests with a new schema each, and of as
many with the one already used, on each server.

  python3 bench/structured_outputs.py --rounds 2 --out bench/results/structured_outputs.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from serve_compare import free_port, log, machine_info, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "color": {"enum": ["red", "green", "blue"]},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "color", "member"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brisk", type=Path, default=REPO_ROOT / "build" / "bin" / "brisk")
    p.add_argument("--llama-server", type=Path, default=REPO_ROOT / "build" / "bin" / "llama-server")
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--model-file", type=Path,
                   default=Path.home() / ".cache" / "brisk" / "models" / "gemma-3-270m-q4_k_m.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--requests", type=int, default=3, help="per stream, per wave")
    p.add_argument("--free-tokens", type=int, default=40)
    p.add_argument("--ttft-probes", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path)
    return p.parse_args()


def schema_format(schema: dict, name: str = "person") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def chat(port: int, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wave(port: int, streams: int, requests: int, body: dict, check_schema: bool) -> dict:
    tokens = [0] * streams
    failures: list[str] = []

    def stream(i: int) -> None:
        for _ in range(requests):
            answer = chat(port, body)
            tokens[i] += answer["usage"]["completion_tokens"]
            if check_schema:
                choice = answer["choices"][0]
                try:
                    value = json.loads(choice["message"]["content"])
                    assert set(value) == set(PERSON["properties"]) or choice["finish_reason"] != "stop"
                except (ValueError, AssertionError):
                    failures.append(choice["message"]["content"][:200])

    started = time.monotonic()
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    return {"wall_s": wall, "completion_tokens": sum(tokens),
            "output_tok_s": sum(tokens) / wall, "schema_failures": failures}


def first_token_ms(port: int, body: dict) -> float:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"]
            if delta and delta[0].get("delta", {}).get("content"):
                ms = (time.monotonic() - started) * 1000
                break
        for _ in r:  # read the rest: the next probe starts on an idle server
            pass
    return ms


def ttft_probes(port: int, probes: int, salt: str) -> dict:
    new, cached = [], []
    for i in range(probes):
        fresh = json.loads(json.dumps(PERSON))
        fresh["properties"][f"extra_{salt}_{i}"] = {"type": "boolean"}
        fresh["required"].append(f"extra_{salt}_{i}")
        new.append(first_token_ms(port, {"messages": MESSAGES, "response_format":
                                         schema_format(fresh, f"p{i}")}))
        cached.append(first_token_ms(port, {"messages": MESSAGES,
                                            "response_format": schema_format(PERSON)}))
    return {"new_schema_ms": new, "cached_schema_ms": cached}


def main() -> int:
    args = parse_args()
    logdir = tempfile.mkdtemp(prefix="structured-")
    brisk_port, llama_port = free_port(), free_port()
    ctx = 1024 * args.streams
    brisk = start_server("brisk", [str(args.brisk), "serve", "--model", args.model, "--port",
                                   str(brisk_port), "--threads", str(args.threads), "--max-seqs",
                                   str(args.streams), "--ctx-size", str(ctx)], brisk_port,
                         "/ready", logdir)
    llama = start_server("llama-server", [str(args.llama_server), "-m", str(args.model_file),
                                          "--port", str(llama_port), "-t", str(args.threads),
                                          "-np", str(args.streams), "-c", str(ctx),
                                          "--no-jinja", "--chat-template", "gemma"],
                         llama_port, "/health", logdir)
    configs = {
        "brisk_free": (brisk_port, {"messages": MESSAGES, "max_tokens": args.free_tokens}, False),
        "brisk_schema": (brisk_port, {"messages": MESSAGES,
                                      "response_format": schema_format(PERSON)}, True),
        "llama_schema": (llama_port, {"messages": MESSAGES,
                                      "response_format": schema_format(PERSON)}, True),
    }
    results: dict[str, list[dict]] = {name: [] for name in configs}
    ttft: dict[str, list[dict]] = {"brisk": [], "llama": []}
    try:
        for port, body, _ in configs.values():  # warm-up: compile the schema, touch the weights
            wave(port, 4, 1, body, False)
        for round_index in range(args.rounds):
            for name, (port, body, check) in configs.items():
                result = wave(port, args.streams, args.requests, body, check)
                log(f"round {round_index + 1} {name}: {result['output_tok_s']:.1f} tok/s "
                    f"({result['completion_tokens']} tokens, {result['wall_s']:.1f} s, "
                    f"{len(result['schema_failures'])} schema failures)")
                results[name].append(result)
            ttft["brisk"].append(ttft_probes(brisk_port, args.ttft_probes, f"b{round_index}"))
            ttft["llama"].append(ttft_probes(llama_port, args.ttft_probes, f"l{round_index}"))
    finally:
        brisk.stop()
        llama.stop()

    med = {name: statistics.median(r["output_tok_s"] for r in runs) for name, runs in results.items()}
    summary = {
        "output_tok_s_median": med,
        "brisk_schema_over_brisk_free": med["brisk_schema"] / med["brisk_free"],
        "brisk_schema_over_llama_schema": med["brisk_schema"] / med["llama_schema"],
        "ttft_ms_median": {
            server: {kind: statistics.median(v for probe in probes for v in probe[kind])
                     for kind in ("new_schema_ms", "cached_schema_ms")}
            for server, probes in ttft.items()},
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": machine_info(),
            "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
            "waves": results, "ttft": ttft}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
