#!/usr/bin/env python3
"""Validates `brisk plan` against measurement on this machine, in each of its three load modes.

For each model (a case) and mode, `brisk plan --json` predicts TTFT and TPOT on --device; then
`brisk serve` runs the model and `brisk bench` offers the same load with fixed prompt and output
lengths. Compared: median TTFT and median TPOT over the measured requests against the predicted
p50, as (predicted - measured) / measured. The modes:

  burst    `plan --concurrency C --burst`: --bursts separate bench runs of exactly C requests sent
           at once (every connection opened before the clock).
  closed   `plan --concurrency C`: C users, each sending its next request when the last one ends;
           the first wave (a burst, not the steady state the model describes) is left out.
  poisson  `plan --rate R --seed S --num-requests N`: Poisson arrivals at R = each
           --poisson-loads fraction of the replica's predicted max rate; the plan simulates the
           very arrivals bench sends (its seed and count), and a long run's prediction is
           reported beside it; latency counts from each request's scheduled time.

--calibrate-each runs `brisk plan calibrate` with each case's model alone (its own synthetic
steps, not the validation requests) before predicting it. Stdlib only; prints a markdown table;
--out writes JSON with every measured request's file under --work.

  python3 bench/plan_validation.py --device cpu-2vcpu --calibrate-each \
      --case gemma3-270m:256:64 --concurrency 1,8 --modes burst,closed,poisson
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from percentile import percentile  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def catalog_with_memory(brisk_repo: Path, device: str, memory_gb: float, work: Path) -> Path:
    """A copy of data/hardware.toml with this machine's memory for `device` (the catalog's
    generic entry may hold less than the machine under test)."""
    text = (brisk_repo / "data" / "hardware.toml").read_text()
    start = text.index(f'id = "{device}"')
    end = text.find("[[device]]", start)
    end = len(text) if end < 0 else end
    block = re.sub(r"memory_gb = [0-9.]+", f"memory_gb = {memory_gb}", text[start:end], count=1)
    path = work / "hardware.toml"
    path.write_text(text[:start] + block + text[end:])
    return path


def calibrate_alone(brisk: Path, model: str, device: str, home: Path,
                    serve_args: list[str]) -> None:
    """`brisk plan calibrate` with this model only, stored under its own BRISK_HOME."""
    home.mkdir(parents=True, exist_ok=True)
    threads = serve_args[serve_args.index("--threads") + 1] if "--threads" in serve_args else "0"
    subprocess.run([str(brisk), "plan", "calibrate", "--model", model, "--device", device,
                    "--threads", threads], check=True, capture_output=True, text=True,
                   env={**os.environ, "BRISK_HOME": str(home)}, timeout=3600)


def predict(brisk: Path, model: str, device: str, load: dict, isl: int, osl: int,
            extra: list[str], home: Path | None = None) -> dict:
    argv = [str(brisk), "plan", "--model", model, "--devices", device, "--isl", str(isl),
            "--osl", str(osl), "--json", *load_flags(load), *extra]
    env = {**os.environ, "BRISK_HOME": str(home)} if home else None
    candidate = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True,
                                          env=env).stdout)["candidates"][0]
    return {"ttft_ms": candidate["ttft_ms"], "tpot_ms": candidate["tpot_ms"],
            "spread": candidate.get("spread"),
            "max_rate_per_replica": candidate.get("max_rate_per_replica"),
            "efficiency": candidate["efficiency"]["origin"]}


def load_flags(load: dict) -> list[str]:
    """The `brisk plan` flags of a load point."""
    if load["mode"] == "poisson":
        flags = ["--rate", f"{load['rate']:.6g}"]
        if "seed" in load:  # the very arrivals the bench run sends
            flags += ["--seed", str(load["seed"]), "--num-requests", str(load["requests"])]
        return flags
    flags = ["--concurrency", str(load["users"])]
    return flags + ["--burst"] if load["mode"] == "burst" else flags


def bench_runs(load: dict, bursts: int, closed_requests: int, poisson_requests: int,
               seed: int) -> list[list[str]]:
    """The `brisk bench` load flags of each run that measures a load point."""
    if load["mode"] == "burst":
        users = load["users"]
        # A seed each: the same prompts again would come from the prefix cache.
        return [["--concurrency", str(users), "--num-requests", str(users),
                 "--warmup-requests", "1", "--seed", str(seed + index)]
                for index in range(bursts)]
    if load["mode"] == "closed":
        users = load["users"]
        return [["--concurrency", str(users), "--num-requests",
                 str(2 * users + max(closed_requests, users)), "--warmup-requests", "1"]]
    return [["--rate", f"{load['rate']:.6g}", "--arrival", "poisson", "--num-requests",
             str(poisson_requests), "--warmup-requests", "1", "--seed", str(seed)]]


def measure(brisk: Path, model: str, load: dict, isl: int, osl: int, runs: list[list[str]],
            serve_args: list[str], out_dir: Path) -> dict:
    """Each of `runs` against one `brisk serve`; statistics over all their measured requests. A
    closed loop's first wave (its first `users` requests by send time: a burst) and last (sent
    while the other users were stopping) are left out."""
    port = free_port()
    users = load.get("users", 1)
    max_seqs = users if load["mode"] != "poisson" else 16
    server = subprocess.Popen([str(brisk), "serve", "--model", model, "--port", str(port),
                               "--max-seqs", str(max_seqs), *serve_args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        for index, flags in enumerate(runs):
            run_dir = out_dir / f"run{index}"
            subprocess.run([str(brisk), "bench", "--url", f"http://127.0.0.1:{port}", *flags,
                            "--input-tokens", str(isl), "--output-tokens", str(osl),
                            "--out", str(run_dir)],
                           check=True, capture_output=True, text=True, timeout=3600)
        steps = server_steps(port)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {**measured_statistics(load, [out_dir / f"run{i}" for i in range(len(runs))]),
            "server_steps": steps}


def measured_statistics(load: dict, run_dirs: list[Path]) -> dict:
    """TTFT and TPOT over the measured requests of `run_dirs` (each a brisk bench --out): every
    request, but a closed loop's first `users` and last `users` by send time."""
    ttft_ms, tpot_ms = [], []
    failed = 0
    for run_dir in run_dirs:
        with open(run_dir / "requests.csv") as rows:
            requests = sorted(csv.DictReader(rows), key=lambda row: float(row["sent_ms"]))
        if load["mode"] == "closed":
            requests = requests[load["users"]:-load["users"]]
        failed += sum(1 for row in requests if not row["first_token_ms"])
        for row in requests:
            if not row["first_token_ms"]:  # refused or failed: no latency to count
                continue
            first, end = float(row["first_token_ms"]), float(row["end_ms"])
            ttft_ms.append(first - float(row["scheduled_ms"]))
            tokens = int(row["completion_tokens"])
            if tokens > 1:
                tpot_ms.append((end - first) / (tokens - 1))

    def summary(values):
        return {"mean": sum(values) / len(values), "p50": percentile(values, 50),
                "p95": percentile(values, 95), "samples": len(values)}

    return {"ttft_ms": summary(ttft_ms), "tpot_ms": summary(tpot_ms), "failed": failed}


def server_steps(port: int) -> dict:
    """The server's own account of its engine steps (all of them, warm-ups included), from
    /metrics: how many, their mean wall time and tokens, and the mean of each phase."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^(brisk_(?:step_duration_seconds|batch_tokens|step_phase_seconds)'
                         r'_(?:sum|count))(\{phase="(\w+)"\})? ([0-9.eE+-]+)$', line)
        if match:
            values[match.group(1) + (f".{match.group(3)}" if match.group(3) else "")] = \
                float(match.group(4))
    count = values.get("brisk_step_duration_seconds_count", 0)
    if not count:
        return {}
    steps = {"count": count,
             "mean_ms": 1000 * values["brisk_step_duration_seconds_sum"] / count,
             "mean_tokens": values.get("brisk_batch_tokens_sum", 0) /
             max(1, values.get("brisk_batch_tokens_count", 0))}
    for phase in ("schedule", "decode", "sample", "commit"):
        phase_count = values.get(f"brisk_step_phase_seconds_count.{phase}", 0)
        if phase_count:
            steps[f"{phase}_mean_ms"] = \
                1000 * values[f"brisk_step_phase_seconds_sum.{phase}"] / phase_count
    return steps


def load_points(args, predict_at) -> list[dict]:
    """The load points of one case, in --modes order; Poisson rates are fractions of the max rate
    the planner predicts for the case (`predict_at` takes a load and returns a prediction)."""
    points = []
    for mode in args.modes.split(","):
        if mode in ("burst", "closed"):
            points += [{"mode": mode, "users": int(c)} for c in args.concurrency.split(",")]
        elif mode == "poisson":
            max_rate = predict_at({"mode": "poisson", "rate": 1.0})["max_rate_per_replica"]
            points += [{"mode": "poisson", "rate": float(f) * max_rate, "load": float(f),
                        "seed": args.seed, "requests": args.poisson_requests}
                       for f in args.poisson_loads.split(",")]
        else:
            raise SystemExit(f"unknown mode {mode!r}: burst, closed or poisson")
    return points


def scaled_calibration(home: Path, factor: float) -> Path:
    """A copy of `home`'s calibration.json, in a temporary directory, whose decode steps all take
    `factor` times longer (each device's decode_batch_scale multiplied by it)."""
    data = json.loads((home / "calibration.json").read_text())
    for device in data["devices"].values():
        scales = device.get("decode_batch_scale") or [{"batch": 1.0, "scale": 1.0}]
        device["decode_batch_scale"] = [{**s, "scale": s["scale"] * factor} for s in scales]
    scaled = Path(tempfile.mkdtemp(prefix=f"{home.name}-decode-x{factor:g}-"))
    (scaled / "calibration.json").write_text(json.dumps(data, indent=1))
    return scaled


def add_long_run(row: dict, brisk: Path, device: str, plan_args: list[str],
                 home: Path | None) -> None:
    """A Poisson point's prediction for a long run at its rate (1,500 arrivals), beside the one
    for the arrivals measured: how far one run's arrivals sit from the average."""
    if row["load"]["mode"] != "poisson":
        return
    load = {key: value for key, value in row["load"].items() if key not in ("seed", "requests")}
    row["predicted_long_run"] = predict(brisk, row["model"], device, load, row["isl"],
                                        row["osl"], plan_args, home)


def point_tag(load: dict) -> str:
    """The name of a load point's directory under --work."""
    return load["mode"] + (f"-c{load['users']}" if "users" in load else f"-{load['load']:.2f}")


def with_errors(row: dict) -> dict:
    """Each figure's (predicted - measured) / measured: p50 (`METRIC_error`), p95, mean; and
    for an open loop whether the measured p50 and p95 fall in the plan's spread (the range
    one run of that many requests measures across seeds)."""
    spread = row["predicted"].get("spread")
    for metric in ("ttft_ms", "tpot_ms"):
        p, m = row["predicted"][metric]["p50"], row["measured"][metric]["p50"]
        row[f"{metric}_error"] = (p - m) / m
        if "p95" in row["measured"][metric]:
            p, m = row["predicted"][metric]["p95"], row["measured"][metric]["p95"]
            row[f"{metric}_p95_error"] = (p - m) / m
        if spread:
            for stat in ("p50", "p95"):
                low, high = spread[metric][stat]
                row[f"{metric}_{stat}_in_spread"] = \
                    low <= row["measured"][metric][stat] <= high
        if "mean" in row["measured"][metric]:
            p, m = row["predicted"][metric]["mean"], row["measured"][metric]["mean"]
            row[f"{metric}_mean_error"] = (p - m) / m
    return row


def long_run(row: dict) -> str:
    if "predicted_long_run" not in row:
        return ""
    p = row["predicted_long_run"]
    return f"{p['ttft_ms']['p50']:.0f} / {p['tpot_ms']['p50']:.1f} ms"


def describe(load: dict) -> str:
    if load["mode"] == "poisson":
        return f"Poisson {load['rate']:.2f}/s ({load['load']:.0%} of max)"
    return f"{load['mode']} C={load['users']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brisk-bin", default=str(REPO_ROOT / "build" / "bin" / "brisk"))
    parser.add_argument("--device", required=True, help="catalog id of this machine")
    parser.add_argument("--case", action="append", default=[],
                        help="MODEL:ISL:OSL (a pulled model name or a GGUF path)")
    parser.add_argument("--modes", default="burst,closed,poisson")
    parser.add_argument("--concurrency", default="1,8", help="users of burst and closed points")
    parser.add_argument("--poisson-loads", default="0.3,0.6",
                        help="Poisson rates as fractions of the predicted max rate")
    parser.add_argument("--bursts", type=int, default=3,
                        help="separate bursts of C requests measured per burst point")
    parser.add_argument("--closed-requests", type=int, default=24,
                        help="requests measured per closed-loop point (besides the first and "
                             "last waves)")
    parser.add_argument("--poisson-requests", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1, help="seed of the Poisson arrivals")
    parser.add_argument("--serve-args", default="", help="extra brisk serve flags")
    parser.add_argument("--plan-args", default="", help="extra brisk plan flags")
    parser.add_argument("--work", default="/tmp/plan-validation")
    parser.add_argument("--calibrate-each", action="store_true",
                        help="calibrate with each case's own model before predicting it, "
                             "instead of using the stored calibration")
    parser.add_argument("--memory-gb", type=float,
                        help="this machine's memory, replacing the catalog entry's for --device")
    parser.add_argument("--repredict", metavar="JSON",
                        help="measure nothing: predict again, with this build and the stored "
                             "calibrations, the points of an earlier --out file")
    parser.add_argument("--decode-scale", type=float, default=1.0,
                        help="with --repredict: predict with every calibrated decode step this "
                             "many times slower (how sensitive a point is to step-cost error)")
    parser.add_argument("--out")
    args = parser.parse_args()
    if not args.case and not args.repredict:
        parser.error("give at least one --case (or --repredict)")
    brisk = Path(args.brisk_bin)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    plan_args = args.plan_args.split()
    if args.memory_gb:
        plan_args += ["--catalog", str(catalog_with_memory(REPO_ROOT, args.device, args.memory_gb,
                                                           Path(tempfile.mkdtemp())))]
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.repredict:
        earlier = json.loads(Path(args.repredict).read_text())
        started = earlier["started"]
        for row in earlier["rows"]:
            home = row.get("calibration_home")
            if home is None and args.calibrate_each:  # files written before the field existed
                home = str(Path(args.work) / f"home-{Path(row['model']).stem}")
            home = Path(home) if home else None
            if home and args.decode_scale != 1:
                home = scaled_calibration(home, args.decode_scale)
            run_dirs = sorted((Path(args.work) / f"{Path(row['model']).stem}-{point_tag(row['load'])}")
                              .glob("run*"))
            if run_dirs:  # the statistics again from the requests, with today's definitions
                row["measured"] = {**row["measured"],
                                   **measured_statistics(row["load"], run_dirs)}
            if row["load"]["mode"] == "poisson" and "seed" not in row["load"]:
                # Written before plan took a seed: one bench run of --seed's arrivals.
                row["load"] = {**row["load"], "seed": args.seed,
                               "requests": row["measured"]["ttft_ms"]["samples"]}
            row["predicted"] = predict(brisk, row["model"], args.device, row["load"], row["isl"],
                                       row["osl"], plan_args, home)
            add_long_run(row, brisk, args.device, plan_args, home)
            rows.append(with_errors(row))
    for case in [] if args.repredict else args.case:
        model, isl, osl = case.rsplit(":", 2)
        isl, osl = int(isl), int(osl)
        stem = Path(model).stem
        home = None
        if args.calibrate_each:
            home = Path(args.work) / f"home-{stem}"
            log(f"calibrating {args.device} with {model} alone")
            calibrate_alone(brisk, model, args.device, home, args.serve_args.split())

        def predict_at(load, model=model, isl=isl, osl=osl, home=home):
            return predict(brisk, model, args.device, load, isl, osl, plan_args, home)

        for load in load_points(args, predict_at):
            predicted = predict_at(load)
            log(f"{model} {describe(load)}: predicted TTFT p50 {predicted['ttft_ms']['p50']:.0f} "
                f"ms, TPOT p50 {predicted['tpot_ms']['p50']:.1f} ms; measuring")
            tag = point_tag(load)
            runs = bench_runs(load, args.bursts, args.closed_requests, args.poisson_requests,
                              args.seed)
            measured = measure(brisk, model, load, isl, osl, runs, args.serve_args.split(),
                               Path(args.work) / f"{stem}-{tag}")
            row = {"model": model, "isl": isl, "osl": osl, "load": load,
                   "calibration_home": str(home) if home else None,
                   "predicted": predicted, "measured": measured}
            add_long_run(row, brisk, args.device, plan_args, home)
            row = with_errors(row)
            log(f"  measured TTFT p50 {measured['ttft_ms']['p50']:.0f} ms, TPOT p50 "
                f"{measured['tpot_ms']['p50']:.1f} ms over {measured['ttft_ms']['samples']} "
                f"requests ({measured['failed']} refused or failed)")
            rows.append(row)
    print("| model | ISL/OSL | load | TTFT p50 predicted | measured | error | TPOT p50 predicted "
          "| measured | error | p95 error TTFT / TPOT | p50 in spread TTFT / TPOT "
          "| long run: TTFT / TPOT p50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def p95_errors(r):
        if "ttft_ms_p95_error" not in r:
            return "n/a"
        return f"{r['ttft_ms_p95_error']:+.0%} / {r['tpot_ms_p95_error']:+.0%}"

    def in_spread(r):
        if "ttft_ms_p50_in_spread" not in r:
            return ""
        return " / ".join("yes" if r[f"{m}_p50_in_spread"] else "no"
                          for m in ("ttft_ms", "tpot_ms"))

    for r in rows:
        print(f"| {Path(r['model']).name} | {r['isl']}/{r['osl']} | {describe(r['load'])} | "
              f"{r['predicted']['ttft_ms']['p50']:.0f} ms | {r['measured']['ttft_ms']['p50']:.0f} ms"
              f" | {r['ttft_ms_error']:+.0%} | {r['predicted']['tpot_ms']['p50']:.1f} ms | "
              f"{r['measured']['tpot_ms']['p50']:.1f} ms | {r['tpot_ms_error']:+.0%} | "
              f"{p95_errors(r)} | {in_spread(r)} | {long_run(r)} |")
    for model in dict.fromkeys(r["model"] for r in rows):
        origin = next(r for r in rows if r["model"] == model)["predicted"]["efficiency"]
        print(f"\nefficiencies for {model}: {origin}")
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"machine": platform.node(), "started": started, "argv": sys.argv, "rows": rows},
            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
