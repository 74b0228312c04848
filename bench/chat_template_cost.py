#!/usr/bin/env python3
"""Chat template cost: brisk serve on SmolLM2 with the GGUF's Jinja template (default) and with
the built-in chatml family (--chat-template chatml). With a system message both render the same
ChatML text, so the prompt tokens are equal and the difference is the rendering. Interleaved.

  python3 bench/chat_template_cost.py REQUESTS [OUT.json]   (needs `brisk pull smollm2-135m`)"""
import json, statistics, subprocess, sys, time, urllib.request, socket
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
servers = {}
for name, extra in (("jinja", []), ("builtin", ["--chat-template", "chatml"])):
    p = port()
    proc = subprocess.Popen([str(__import__("pathlib").Path(__file__).resolve().parents[1] / "build" / "bin" / "brisk"), "serve", "--model", "smollm2-135m", "--port", str(p),
                             "--threads", "2", "--max-seqs", "1", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers[name] = (p, proc)
for name, (p, _) in servers.items():
    for _ in range(120):
        try: urllib.request.urlopen(f"http://127.0.0.1:{p}/health", timeout=1); break
        except OSError: time.sleep(0.5)
body = json.dumps({"messages": [{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "Name three colors."},
                                {"role": "assistant", "content": "Red, green, blue."},
                                {"role": "user", "content": "Two more?"}],
                   "max_tokens": 1, "temperature": 0}).encode()
times = {n: [] for n in servers}; tokens = {}
for i in range(int(sys.argv[1])):
    for name, (p, _) in servers.items():
        req = urllib.request.Request(f"http://127.0.0.1:{p}/v1/chat/completions", body, {"Content-Type": "application/json"})
        t = time.perf_counter(); r = json.loads(urllib.request.urlopen(req).read()); dt = (time.perf_counter() - t) * 1000
        if i >= 3: times[name].append(dt)
        tokens[name] = r["usage"]["prompt_tokens"]
for _, proc in servers.values(): proc.terminate()
med = {n: statistics.median(v) for n, v in times.items()}
result = json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": socket.gethostname(),
                     "prompt_tokens": tokens, "median_ms": med, "ratio_jinja_over_builtin": med["jinja"] / med["builtin"],
                     "requests_each": len(times["jinja"]), "samples_ms": times})
print(result)
if len(sys.argv) > 2: open(sys.argv[2], "w").write(result)
