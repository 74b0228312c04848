"""Connections that stall, structured logs, and a graceful stop with work in flight."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx

from conftest import (
    GUARDED_READ_TIMEOUT_S,
    MODEL_NAME,
    _start_brisk,
    completion,
    get_metrics,
)


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


def test_sigterm_finishes_in_flight_work_then_exits_zero(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-drain", ["--drain-timeout", "30"], api_key=None)
    result: dict = {}

    def long_request():
        r = httpx.post(server.base_url + "/v1/completions", timeout=120,
                       json={"model": MODEL_NAME, "prompt": "Once", "max_tokens": 40,
                             "ignore_eos": True})
        result["status"] = r.status_code
        result["body"] = r.json()

    try:
        worker = threading.Thread(target=long_request)
        worker.start()
        time.sleep(0.5)  # the request is running
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        # Draining: no new work is accepted.
        try:
            refused = httpx.get(server.base_url + "/ready", timeout=5).status_code
        except httpx.TransportError:
            refused = "closed"
        assert refused in (503, "closed")
        worker.join(timeout=120)
        assert result["status"] == 200, result
        assert result["body"]["usage"]["completion_tokens"] == 40
        assert result["body"]["choices"][0]["finish_reason"] == "length"
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.kill()


def test_sigterm_during_a_requests_first_step_still_finishes_it(tmp_path_factory):
    """A request whose whole prompt is one long step is running from the step's start: the
    drain waits for it, and /metrics counts it. (The scheduler once counted a request neither
    waiting nor running until its first step ended, so a drain begun then cancelled it.)"""
    server = _start_brisk(tmp_path_factory, "brisk-drain-prefill",
                          ["--drain-timeout", "60", "--max-batched-tokens", "1024"], api_key=None)
    result: dict = {}

    def long_prompt_request():
        # ~600 tokens prefilled in one step (a second or more on a CPU), then its one token.
        r = httpx.post(server.base_url + "/v1/completions", timeout=300,
                       json={"model": MODEL_NAME, "prompt": "word " * 600, "max_tokens": 1,
                             "ignore_eos": True})
        result["status"] = r.status_code
        result["body"] = r.json()

    try:
        worker = threading.Thread(target=long_prompt_request)
        worker.start()
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
