#!/usr/bin/env python3
"""Soak test of `brisk serve` (issue 13): many concurrent clients, some well-behaved, some that
vanish mid-queue, mid-prefill, mid-stream or mid-request, some that send malformed requests, for
a long time; then: did anything crash, answer 5xx, hang, leak memory or descriptors, or leave
KV cells and requests behind? And how much did the misbehaving clients cost the others' TTFT?

It starts `brisk serve` itself (loopback, a free port; --server-arg passes flags), runs the mixed
load for --duration, waits until the server is idle, measures, runs the well-behaved clients
alone for --baseline, and stops the server with SIGTERM. Writes everything, raw samples included,
to --out (JSON) and prints the figures as a markdown table.

  .venv/bin/python bench/soak.py                       # 1,000 streams, 600 s (make soak)
  .venv/bin/python bench/soak.py --streams 150 --duration 40 --baseline 0 \\
      --server-arg=--read-timeout --server-arg=5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soak_lib import report  # noqa: E402
from soak_lib.soak_run import DEFAULT_SERVER_ARGS, DEFAULT_SHARES, SoakConfig, run_soak  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("BRISK_BIN_DIR", REPO_ROOT / "build" / "bin"))


def parse_per_role(text: str, defaults: dict[str, float]) -> dict[str, float]:
    """'role=value,...' over the defaults; a bare number sets every role."""
    try:
        return {role: float(text) for role in defaults}
    except ValueError:
        pass
    values = dict(defaults)
    for item in filter(None, text.split(",")):
        role, _, value = item.partition("=")
        if role not in values:
            raise argparse.ArgumentTypeError(f"unknown role {role!r}; roles: {sorted(values)}")
        values[role] = float(value)
    return values


def parse_shares(text: str) -> dict[str, float]:
    return parse_per_role(text, DEFAULT_SHARES)


def parse_think(text: str) -> dict[str, float]:
    return parse_per_role(text, {role: 1.0 for role in DEFAULT_SHARES})


def parse_args(argv=None) -> argparse.Namespace:
    today = time.strftime("%Y-%m-%d")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--server-arg", action="append", default=None, dest="server_args",
                   help="a flag for brisk serve, repeatable (--server-arg=--max-seqs "
                        "--server-arg=8); added after the default "
                        f"{' '.join(DEFAULT_SERVER_ARGS)}, which goes when you pass your own "
                        "--override-generation-config")
    p.add_argument("--streams", type=int, default=1000, help="concurrent clients")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of mixed load")
    p.add_argument("--baseline", type=float, default=None,
                   help="seconds of the well-behaved clients alone (default duration/5; 0: none)")
    p.add_argument("--shares", type=parse_shares, default=dict(DEFAULT_SHARES),
                   help="clients per role, e.g. well_behaved=0.5,vanishing=0.3,malformed=0.2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--think", type=parse_think, default=parse_think("1"),
                   help="mean seconds between one client's actions: a number, or per role "
                        "(well_behaved=60,vanishing=1,malformed=1)")
    p.add_argument("--ramp", type=float, default=None,
                   help="seconds over which the clients start (default min(10, duration/10))")
    p.add_argument("--hang-after", type=float, default=600.0,
                   help="a well-behaved request not finished by then is a hang")
    p.add_argument("--sample-every", type=float, default=2.0)
    p.add_argument("--idle-timeout", type=float, default=60.0,
                   help="how long the server may take to be idle again after the load")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / f"soak_{today}.json")
    p.add_argument("--server-log", type=Path, default=None,
                   help="brisk serve's log (default: beside --out, .server.log)")
    return p.parse_args(argv)


def config_from(args: argparse.Namespace) -> SoakConfig:
    config = SoakConfig(
        brisk_bin=args.brisk_bin, model=args.model,
        log_path=args.server_log or args.out.with_suffix(".server.log"),
        streams=args.streams, duration_s=args.duration,
        baseline_s=args.duration / 5 if args.baseline is None else args.baseline,
        shares=args.shares, seed=args.seed, think_s=args.think,
        ramp_s=min(10.0, args.duration / 10) if args.ramp is None else args.ramp,
        hang_after_s=args.hang_after, sample_every_s=args.sample_every,
        idle_timeout_s=args.idle_timeout)
    user_args = args.server_args or []
    if any(arg.startswith("--override-generation-config") for arg in user_args):
        config.server_args = user_args
    else:
        config.server_args = DEFAULT_SERVER_ARGS + user_args
    return config


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.brisk_bin.exists():
        raise SystemExit(f"{args.brisk_bin} not found: build brisk (make) or pass --brisk-bin")
    config = config_from(args)
    print(f"soak: {config.streams} streams for {config.duration_s:.0f} s, baseline "
          f"{config.baseline_s:.0f} s, server log {config.log_path}", file=sys.stderr, flush=True)
    result = run_soak(config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(report.figures_table(result))
    missed = [name for name, goal in result["goals"].items() if not goal["met"]]
    print(f"\ngoals missed: {', '.join(missed) or 'none'}; raw results in {args.out}")
    for kind, examples in result["soak"]["violation_examples"].items():
        print(f"  {kind}: {examples[0][:300]}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
