"""Connections that stall, structured logs, and a graceful stop with work in flight."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import (
    BRISK_BIN,
    GUARDED_READ_TIMEOUT_S,
    MODEL_NAME,
    _start_brisk,
    completion,
    get_metrics,
    sse_lines,
)

from sanitizer_reports import running_under_a_sanitizer


def _closed_by_server_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes the connection (recv returns b'') within `seconds`."""
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def test_slow_client_cannot_hold_a_connection(brisk_guarded):
    with socket.create_connection(("127.0.0.1", brisk_guarded.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len")  # then silence
        assert _closed_by_server_within(sock, GUARDED_READ_TIMEOUT_S + 5)


def test_idle_keep_alive_connection_is_closed(brisk_guarded):
    with socket.create_connection(("127.0.0.1", brisk_guarded.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(4096)
        assert first.startswith(b"HTTP/1.1 200")
        assert _closed_by_server_within(sock, GUARDED_READ_TIMEOUT_S + 5)


def test_server_stays_healthy_after_stalled_clients(brisk_guarded):
    stalled = [socket.create_connection(("127.0.0.1", brisk_guarded.port)) for _ in range(20)]
    try:
        for sock in stalled:
            sock.sendall(b"GET /he")
        r = httpx.get(brisk_guarded.base_url + "/health", timeout=10)
        assert r.status_code == 200
    finally:
        for sock in stalled:
            sock.close()


def test_json_logs_have_one_object_per_line_with_request_timings(brisk_guarded):
    response_id = completion(brisk_guarded.client(), "Hello", max_tokens=3, ignore_eos=True)["id"]
    # The line is written after the response, and earlier tests' requests have lines of their
    # own: wait for this request's.
    deadline = time.time() + 10
    request_lines = []
    while time.time() < deadline and not request_lines:
        lines = [l for l in brisk_guarded.log_path.read_text().splitlines() if l.strip()]
        objects = [json.loads(l) for l in lines]  # every line must be JSON
        assert all("ts" in o and "level" in o for o in objects)
        request_lines = [o for o in objects
                         if o.get("event") == "request" and o.get("id") == response_id]
        time.sleep(0.2)
    assert request_lines, f"no request log line with id {response_id}"
    line = request_lines[-1]
    for key in ("id", "status", "ttft_ms", "e2e_ms", "prompt_tokens", "completion_tokens"):
        assert key in line
    assert line["completion_tokens"] == 3


def _complete_in_background(server, prompt: str, max_tokens: int, timeout: float):
    """Starts a completion on a thread; returns the thread and the dict that gets its status
    and body."""
    result: dict = {}

    def request():
        r = httpx.post(server.base_url + "/v1/completions", timeout=timeout,
                       json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                             "ignore_eos": True})
        result["status"] = r.status_code
        result["connection"] = r.headers.get("connection")
        result["body"] = r.json()

    worker = threading.Thread(target=request)
    worker.start()
    return worker, result


def test_sigterm_finishes_in_flight_work_then_exits_zero(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-drain", ["--drain-timeout", "30"], api_key=None)
    try:
        # A kept-alive connection that is idle when the signal lands (a load balancer's pool).
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 200")
        # Long enough to outlast the checks below (40 tokens ended within a second here, and the
        # drained server exited before the idle connection's request: b'' instead of a 503).
        worker, result = _complete_in_background(server, "Once", 200, timeout=120)
        time.sleep(0.5)  # the request is running
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        # Draining: no new work is accepted.
        try:
            refused = httpx.get(server.base_url + "/ready", timeout=5).status_code
        except httpx.TransportError:
            refused = "closed"
        assert refused in (503, "closed")
        # A request on the idle connection is refused, and the connection closed after it, so a
        # load balancer neither queues more on it nor meets it closed under a request at the exit.
        idle.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        idle.settimeout(10)
        while chunk := idle.recv(4096):
            answer += chunk
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 503") and b"connection: close" in head, answer
        idle.close()
        worker.join(timeout=120)
        assert result["status"] == 200, result
        assert result["body"]["usage"]["completion_tokens"] == 200
        assert result["body"]["choices"][0]["finish_reason"] == "length"
        # The answer finished during the drain says so: the client does not reuse the connection.
        assert result["connection"] == "close", result
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.kill()


@contextlib.contextmanager
def _streaming_when_sigterm_lands(server):
    """Starts a long stream, sends SIGTERM once its first token is here; yields its lines."""
    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=120,
                      json={"model": MODEL_NAME, "prompt": "Once", "max_tokens": 4000,
                            "ignore_eos": True, "stream": True}) as response:
        assert response.status_code == 200
        lines = sse_lines(response)
        if not any(line.startswith("data: {") for line in lines):
            raise AssertionError("the stream ended before its first token")
        server.proc.send_signal(signal.SIGTERM)
        yield lines


def test_second_signal_exits_at_once(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-second-signal", ["--drain-timeout", "600"],
                          api_key=None)
    try:
        with _streaming_when_sigterm_lands(server):
            time.sleep(0.5)
            assert server.proc.poll() is None, "the first signal drains; it must not exit yet"
            started = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(timeout=10)
            assert time.monotonic() - started < 3
            assert code == 128 + signal.SIGTERM
    finally:
        server.kill()


def test_a_stream_cancelled_by_the_drain_ends_with_an_error_and_finish_reason(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-drain-cancel", ["--drain-timeout", "1"],
                          api_key=None)
    try:
        with _streaming_when_sigterm_lands(server) as lines:
            events = [line[len("data: "):] for line in lines if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["choices"][0]["finish_reason"] == "cancelled", last
        assert last["error"]["code"] == "shutting_down", last
        assert last["error"]["type"] == "server_error"
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.kill()


def test_no_request_admitted_before_the_drain_is_lost(tmp_path_factory):
    """Requests arriving while SIGTERM lands are either finished whole or refused with 503."""
    server = _start_brisk(tmp_path_factory, "brisk-drain-race",
                          ["--drain-timeout", "60", "--max-seqs", "4"], api_key=None)
    outcomes: list = []
    lock = threading.Lock()
    stop_sending = threading.Event()

    def sender():
        while not stop_sending.is_set():
            try:
                r = httpx.post(server.base_url + "/v1/completions", timeout=120,
                               json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 4,
                                     "ignore_eos": True})
                outcome = (r.status_code, r.json().get("choices", [{}])[0].get("finish_reason")
                           if r.status_code == 200 else r.json()["error"]["code"])
            except httpx.TransportError:
                outcome = ("closed", None)  # the listener is gone: never admitted
            with lock:
                outcomes.append(outcome)
            if outcome[0] != 200:
                return

    try:
        threads = [threading.Thread(target=sender) for _ in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        stop_sending.set()
        for thread in threads:
            thread.join(timeout=120)
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.kill()
    finished = [o for o in outcomes if o[0] == 200]
    assert finished and all(o[1] == "length" for o in finished), outcomes
    assert all(o in ((503, "shutting_down"), ("closed", None)) for o in outcomes if o[0] != 200), \
        outcomes


def test_connections_beyond_max_connections_get_503(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-max-connections",
                          ["--max-connections", "3"], api_key=None)
    held = []
    try:
        # An instrumented server accepts late (this failed under ThreadSanitizer at 0.3 s).
        settle_s = 2.0 if running_under_a_sanitizer() else 0.3
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
        time.sleep(settle_s)  # the server has accepted them
        r = httpx.get(server.base_url + "/health", timeout=10)  # the third place is free
        assert r.status_code == 200
        # ... and free again once the server has seen that request's connection close: a
        # connection opened before then is refused in its stead (the test once raced this).
        time.sleep(settle_s)
        held.append(socket.create_connection(("127.0.0.1", server.port)))
        time.sleep(settle_s)
        refused = httpx.get(server.base_url + "/health", timeout=10)
        assert refused.status_code == 503
        assert refused.headers.get("retry-after") == "1"
        assert refused.json()["error"]["code"] == "too_many_connections"
        for sock in held:
            sock.close()
        held = []
        time.sleep(settle_s)
        metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
        assert "brisk_http_connections_refused_total 1" in metrics
        assert 'brisk_requests_rejected_total{reason="too_many_connections"} 1' in metrics
    finally:
        for sock in held:
            sock.close()
        server.kill()


@pytest.mark.parametrize("flag, value, says", [
    ("--max-body-bytes", "0", "--max-body-bytes"),
    ("--max-header-bytes", "10", "--max-header-bytes"),
    ("--max-connections", "0", "--max-connections"),
    ("--max-connections", "1000000", "open files"),
    ("--keep-alive-timeout", "0", "--keep-alive-timeout"),
    ("--public-routes", "health", "--public-routes"),
])
def test_serve_refuses_out_of_range_flags_before_loading_the_model(flag, value, says):
    r = subprocess.run([str(BRISK_BIN), "serve", "--model", MODEL_NAME, flag, value],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert says in r.stderr + r.stdout
    assert "loading" not in r.stderr + r.stdout

def test_sigterm_during_a_requests_first_step_still_finishes_it(tmp_path_factory):
    """A request whose whole prompt is one long step is running from the step's start: the
    drain waits for it, and /metrics counts it. (The scheduler once counted a request neither
    waiting nor running until its first step ended, so a drain begun then cancelled it.)"""
    server = _start_brisk(tmp_path_factory, "brisk-drain-prefill",
                          ["--drain-timeout", "60", "--max-batched-tokens", "1024"], api_key=None)
    try:
        # ~600 tokens prefilled in one step (a second or more on a CPU), then its one token.
        worker, result = _complete_in_background(server, "word " * 600, 1, timeout=300)
        seen_running = False
        deadline = time.monotonic() + 60
        while not seen_running and worker.is_alive() and time.monotonic() < deadline:
            seen_running = get_metrics(server).get("brisk_requests_running") == 1
            time.sleep(0.05)
        assert seen_running, (
            f"brisk_requests_running never showed the request during its prefill: {result}")
        server.proc.send_signal(signal.SIGTERM)
        worker.join(timeout=300)
        assert result["status"] == 200, result
        assert result["body"]["usage"]["completion_tokens"] == 1
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.kill()
