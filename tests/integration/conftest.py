"""Fixtures for brisk's integration tests.

They run the real `build/bin/brisk serve` (and llama.cpp's own `llama-server` and
`llama-completion` from the same build, as references) on loopback and talk to them over HTTP.
The model `gemma3-270m` must already be in the model cache ($BRISK_HOME, default
~/.cache/brisk), e.g. via `build/bin/brisk pull gemma3-270m`.

BRISK_BIN_DIR names another build's bin/ for brisk and the test fixtures (a sanitizer build, see
`make sanitize`); BRISK_LLAMA_BIN_DIR one for the llama.cpp references, which a sanitizer build
does not build (default: BRISK_BIN_DIR).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytest_plugins = ("sanitizer_reports",)  # fails the run on a sanitizer report from a child

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("BRISK_BIN_DIR", REPO_ROOT / "build" / "bin"))
LLAMA_BIN_DIR = Path(os.environ.get("BRISK_LLAMA_BIN_DIR", BIN_DIR))
BRISK_BIN = BIN_DIR / "brisk"
LLAMA_SERVER_BIN = LLAMA_BIN_DIR / "llama-server"
LLAMA_COMPLETION_BIN = LLAMA_BIN_DIR / "llama-completion"

MODEL_NAME = "gemma3-270m"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
# The second real model (`make test` pulls it too): Llama architecture, no sliding window and a
# chat template of its own in the GGUF.
SECOND_MODEL_NAME = "smollm2-135m"
SECOND_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
API_KEY = "secret-key"
CTX_SIZE = 4096
# llama.cpp's compute threads per server; `make sanitize-thread` sets 1, so that ggml's own
# (uninstrumented) worker threads, whose barriers ThreadSanitizer cannot see, do not run at all.
THREADS = int(os.environ.get("BRISK_TEST_THREADS", "2"))

READY_TIMEOUT_S = 120
PORT_RETRIES = 3
GUARDED_READ_TIMEOUT_S = 2
STOP_TIMEOUT_S = 20


def brisk_home() -> Path:
    return Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))


def model_path(file_name: str = MODEL_FILE) -> Path:
    return brisk_home() / "models" / file_name


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `make test` runs the files marked `parallel` on two pytest-xdist workers, a file at a time, in
# collection order (--no-loadscope-reorder): the longest first, so that the two finish together
# instead of one worker starting test_quant.py (3 minutes) when the other is nearly done.
LONGEST_FIRST = ["test_quant.py", "test_soak.py", "test_trace.py", "test_structured_outputs.py",
                 "test_correctness.py", "test_tool_calls.py", "test_plan.py",
                 "test_prefix_cache.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


def _port_was_taken(log: str) -> bool:
    """A server's log says its port was in use (brisk: the OS's message; llama-server: its own)."""
    return "Address already in use" in log or "couldn't bind HTTP server socket" in log


def require_file(path: Path, hint: str) -> None:
    if not path.exists():
        pytest.fail(f"{path} does not exist: {hint}", pytrace=False)


@dataclass
class Server:
    """A server process started by a fixture, with its log file for diagnostics."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    api_key: str | None = None
    proc: subprocess.Popen | None = None
    _log_file: object = field(default=None, repr=False)

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, timeout: float = 300.0, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout, **kwargs)

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "<no log>"

    def start(self, ready_path: str) -> None:
        """Starts the process and waits until `ready_path` answers 200. A port taken between
        free_port() and the server's bind (by another test's client or server: the parallel
        tests run two at a time) is retried on a new port."""
        for attempt in range(PORT_RETRIES):
            try:
                self._start_once(ready_path)
                return
            except RuntimeError as e:
                if attempt + 1 == PORT_RETRIES or not _port_was_taken(self.log_tail()):
                    raise
                self._switch_port(free_port())

    def _switch_port(self, port: int) -> None:
        old = str(self.port)
        self.argv = [str(port) if arg == old else arg.replace(f":{old}", f":{port}")
                     for arg in self.argv]
        self.port = port

    def _start_once(self, ready_path: str) -> None:
        self._log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self.proc.returncode} before it was ready\n"
                    f"command: {' '.join(self.argv)}\nlog:\n{self.log_tail()}"
                )
            try:
                r = httpx.get(self.base_url + ready_path, headers=self.headers, timeout=2.0)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            except httpx.HTTPError as e:
                last = repr(e)
            time.sleep(0.25)
        self.kill()
        raise RuntimeError(
            f"{self.name} not ready on {ready_path} within {READY_TIMEOUT_S}s (last: {last})\n"
            f"log:\n{self.log_tail()}"
        )

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait; returns the exit code, or None if it had to be killed."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finally:
            if self._log_file:
                self._log_file.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


SCRIPTED_STREAM_SERVER_BIN = BIN_DIR / "scripted_stream_server"


@contextlib.contextmanager
def scripted_stream_server(args: list[str], wrap=lambda argv: argv):
    """tests/fixtures/scripted_stream_server with `args` (its timing script); yields its URL.
    `wrap` may change the command line (e.g. pin it to a core)."""
    if not SCRIPTED_STREAM_SERVER_BIN.exists():
        pytest.fail(f"{SCRIPTED_STREAM_SERVER_BIN} does not exist: build the tests (make)",
                    pytrace=False)
    proc = subprocess.Popen(wrap([str(SCRIPTED_STREAM_SERVER_BIN), "--port", "0", *args]),
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"http://127.0.0.1:{int(line.split()[-1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _start_brisk(tmp_path_factory, name: str, extra: list[str], api_key: str | None,
                 model: tuple[str, str] = (MODEL_NAME, MODEL_FILE),
                 ctx_size: int = CTX_SIZE) -> Server:
    require_file(BRISK_BIN, "build brisk first (make)")
    require_file(model_path(model[1]), f"fetch the model first: {BRISK_BIN} pull {model[0]}")
    port = free_port()
    argv = [
        str(BRISK_BIN), "serve",
        "--model", model[0],
        "--port", str(port),
        "--host", "127.0.0.1",
        "--ctx-size", str(ctx_size),
        "--threads", str(THREADS),
        *extra,
    ]
    log = tmp_path_factory.mktemp("logs") / f"{name}.log"
    server = Server(name=name, argv=argv, port=port, log_path=log, api_key=api_key)
    server.start("/ready")
    return server


def _stop_and_check_clean_exit(server: Server) -> None:
    code = server.terminate()
    assert code == 0, (
        f"{server.name} should exit with code 0 within {STOP_TIMEOUT_S}s of SIGTERM, "
        f"got {'a hang (killed)' if code is None else code}\nlog:\n{server.log_tail()}"
    )


@pytest.fixture(scope="session")
def brisk(tmp_path_factory):
    """The main brisk server: 8 sequences, no API key."""
    server = _start_brisk(tmp_path_factory, "brisk", ["--max-seqs", "8"], api_key=None)
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="session")
def brisk_guarded(tmp_path_factory):
    """A brisk server with an API key, a tiny admission queue (1 running + 2 waiting) and the
    vLLM metric names. No --max-queue-delay-ms: its tests fill the queue behind 400-token
    streams, which a busy machine's step costs may price past 30 s (queue_delay is
    test_scheduling's)."""
    server = _start_brisk(
        tmp_path_factory,
        "brisk-guarded",
        ["--api-key", API_KEY, "--max-queued-requests", "2", "--max-seqs", "1",
         "--max-queue-delay-ms", "0",
         "--read-timeout", str(GUARDED_READ_TIMEOUT_S),
         "--keep-alive-timeout", str(GUARDED_READ_TIMEOUT_S), "--log-format", "json",
         "--metrics-compat", "vllm"],
        api_key=API_KEY,
    )
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama.cpp's own server on the same model file, as the reference implementation."""
    require_file(LLAMA_SERVER_BIN, "build the llama.cpp reference tools first (make)")
    require_file(model_path(), f"fetch the model first: {BRISK_BIN} pull {MODEL_NAME}")
    port = free_port()
    argv = [
        str(LLAMA_SERVER_BIN),
        "-m", str(model_path()),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-t", str(THREADS),
        "-c", str(CTX_SIZE),
        # Greedy output near a tie depends on the KV layout (flash-attention tiling over the
        # cache): with llama-server's defaults (4 slots, small SWA cache) one of the reference
        # prompts flips a token against llama-completion. Give it brisk's layout: one unified
        # buffer for 8 sequences, full-size SWA caches.
        "-np", "8",
        "--kv-unified",
        "--swa-full",
        # The GGUF carries no chat template; llama-server would fall back to chatml, brisk picks
        # llama.cpp's built-in gemma template by architecture. Compare like with like.
        "--no-jinja",
        "--chat-template", "gemma",
    ]
    log = tmp_path_factory.mktemp("logs") / "llama-server.log"
    server = Server(name="llama-server", argv=argv, port=port, log_path=log)
    server.start("/health")
    yield server
    server.terminate()
    server.kill()


@pytest.fixture(scope="session")
def test_reranker_file(tmp_path_factory) -> Path:
    """A reranker GGUF made from all-MiniLM-L6-v2's encoder and a generated head
    (scripts/make_test_reranker.py): no reranker is packaged on PyPI."""
    encoder = model_path("all-MiniLM-L6-v2-f16.gguf")
    require_file(encoder, f"fetch the encoder first: {BRISK_BIN} pull all-minilm-l6-v2")
    out = tmp_path_factory.mktemp("reranker") / "test-reranker.gguf"
    subprocess.run(["/usr/bin/python3", str(REPO_ROOT / "scripts" / "make_test_reranker.py"),
                    "--gguf-py", str(REPO_ROOT / ".deps" / "llama.cpp" / "gguf-py"), str(encoder),
                    str(out)], check=True, capture_output=True, text=True, timeout=120)
    return out


# ---------------------------------------------------------------------------------------------
# Helpers shared by the test modules
# ---------------------------------------------------------------------------------------------


def assert_openai_error(response: httpx.Response, status: int) -> dict:
    """The response has `status` and an OpenAI-style error body; returns the error object."""
    assert response.status_code == status, (
        f"expected HTTP {status}, got {response.status_code}: {response.text[:500]}"
    )
    try:
        body = response.json()
    except ValueError:
        pytest.fail(f"error body is not JSON: {response.text[:500]!r}")
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in err, f"error object lacks '{key}': {err}"
    assert isinstance(err["message"], str) and err["message"].strip(), err
    assert isinstance(err["type"], str) and err["type"], err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], (str, int)), err
    return err


TIMING_FIELDS = (
    "queue_ms", "prefill_ms", "ttft_ms", "decode_ms", "e2e_ms", "prompt_tokens", "completion_tokens",
)


def assert_timings(obj: dict, usage: dict | None = None, wall_ms: float | None = None) -> None:
    assert isinstance(obj.get("brisk_timings"), dict), f"no brisk_timings object in {obj}"
    t = obj["brisk_timings"]
    for key in TIMING_FIELDS:
        assert key in t, f"brisk_timings lacks '{key}': {t}"
        assert isinstance(t[key], (int, float)) and t[key] >= 0, f"{key}={t[key]!r} in {t}"
    assert t["ttft_ms"] >= t["queue_ms"], t
    assert t["e2e_ms"] >= t["ttft_ms"], t
    assert t["e2e_ms"] + 1 >= t["decode_ms"], t
    if usage is not None:
        assert t["prompt_tokens"] == usage["prompt_tokens"], (t, usage)
        assert t["completion_tokens"] == usage["completion_tokens"], (t, usage)
    if wall_ms is not None:
        # the server cannot have spent longer on the request than the client waited for it
        assert t["e2e_ms"] <= wall_ms + 50, f"e2e_ms {t['e2e_ms']} > client wall time {wall_ms}"


def assert_usage(usage: dict) -> None:
    assert isinstance(usage, dict), usage
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert isinstance(usage.get(key), int), f"usage.{key} missing or not int: {usage}"
    assert usage["prompt_tokens"] > 0, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage


@dataclass
class StreamResult:
    status: int
    headers: dict
    raw_lines: list[str]
    chunks: list[dict]
    done: bool

    def text(self) -> str:
        out = []
        for c in self.chunks:
            for ch in c.get("choices") or []:
                if "text" in ch and ch["text"]:
                    out.append(ch["text"])
                delta = ch.get("delta") or {}
                if delta.get("content"):
                    out.append(delta["content"])
        return "".join(out)

    def finish_reason(self) -> str | None:
        reasons = [
            ch.get("finish_reason")
            for c in self.chunks
            for ch in (c.get("choices") or [])
            if ch.get("finish_reason")
        ]
        assert len(reasons) <= 1, f"more than one finish_reason in stream: {reasons}"
        return reasons[0] if reasons else None

    def usage_chunk(self) -> dict | None:
        with_usage = [c for c in self.chunks if c.get("usage")]
        return with_usage[-1] if with_usage else None


def sse_lines(response: httpx.Response):
    """The lines of a streamed SSE body. SSE lines end at LF or CR LF only; httpx's iter_lines
    also splits at U+2028, U+0085 and \\x1c-\\x1e, which a sampled text may hold, and cut a
    chunk's JSON in two (a CI failure on 2026-12-06)."""
    pending = b""
    for piece in response.iter_bytes():
        *lines, pending = (pending + piece).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode()
    if pending:
        yield pending.rstrip(b"\r").decode()


def stream_sse(client: httpx.Client, path: str, payload: dict) -> StreamResult:
    """POSTs a streaming request and parses the SSE events."""
    raw, chunks, done = [], [], False
    with client.stream("POST", path, json=payload) as r:
        if r.status_code != 200:
            r.read()
            return StreamResult(r.status_code, dict(r.headers), [r.text], [], False)
        for line in sse_lines(r):
            raw.append(line)
            if not line.strip() or line.startswith(":"):
                continue
            assert line.startswith("data: "), f"SSE line without 'data: ': {line!r}"
            data = line[len("data: "):]
            if data.strip() == "[DONE]":
                done = True
                continue
            assert not done, f"data after [DONE]: {line!r}"
            chunks.append(json.loads(data))
        return StreamResult(r.status_code, dict(r.headers), raw, chunks, done)


def completion(client: httpx.Client, prompt: str, **params) -> dict:
    payload = {"model": MODEL_NAME, "prompt": prompt, "temperature": 0, **params}
    r = client.post("/v1/completions", json=payload)
    assert r.status_code == 200, f"{r.status_code}: {r.text[:500]} for {payload}"
    return r.json()


def completion_text(client: httpx.Client, prompt: str, **params) -> str:
    return completion(client, prompt, **params)["choices"][0]["text"]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format → {'name{labels}': value} (labels kept verbatim, sorted)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$", line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if labels:
            pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels)
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs)) + "}"
        out[name + labels] = float(value)
    return out


def get_metrics(server: Server) -> dict[str, float]:
    r = httpx.get(server.base_url + "/metrics", headers=server.headers, timeout=10)
    assert r.status_code == 200, f"/metrics: {r.status_code} {r.text[:300]}"
    return parse_metrics(r.text)


def run_bench_args(*args, check: bool = True) -> subprocess.CompletedProcess:
    """`brisk bench --progress off ARGS...`; asserts it succeeded unless `check` is False."""
    proc = subprocess.run([str(BRISK_BIN), "bench", "--progress", "off", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def read_requests_csv(out_dir: Path) -> list[dict]:
    """A bench --out directory's requests.csv: the measured requests only."""
    with open(out_dir / "requests.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """brisk serve recording to a trace (--trace-out), one per test module; yields (server, trace
    path)."""
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    server = _start_brisk(tmp_path_factory, "brisk-traced",
                          ["--max-seqs", "4", "--trace-out", str(path)], api_key=None)
    yield server, path
    _stop_and_check_clean_exit(server)
