"""Two brisk serve replicas behind HAProxy, configured by the shipped deploy/haproxy/haproxy.cfg:
one replica is stopped (SIGTERM) in the middle of a `brisk bench` run, and no client request
fails.

Needs Debian's `haproxy` package; scripts/install-deps.sh installs it.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import signal
import socket
import threading
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from conftest import (
    BRISK_BIN,
    MODEL_FILE,
    MODEL_NAME,
    REPO_ROOT,
    Server,
    free_port,
    get_metrics,
    model_path,
    parse_metrics,
    require_file,
)

HAPROXY_CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
BENCH_USERS = 4
BENCH_DURATION_S = 16
OUTPUT_TOKENS = 8
WARMUP_REQUESTS = 2
DRAIN_TIMEOUT_S = 20
WAIT_S = 30
COMPLETIONS = "/v1/completions"
FINISHED = 'brisk_requests_finished_total{finished_reason="length"}'
SHUTTING_DOWN = 'brisk_requests_rejected_total{reason="shutting_down"}'
LONG_REQUEST_TOKENS = 200
LONG_DRAIN_TIMEOUT_S = 60


def _start_replica(tmp_path: Path, name: str, drain_timeout_s: int = DRAIN_TIMEOUT_S) -> Server:
    """A small brisk serve: one compute thread each, so two fit on a small machine."""
    require_file(BRISK_BIN, "build brisk first (make)")
    require_file(model_path(MODEL_FILE), f"fetch the model first: {BRISK_BIN} pull {MODEL_NAME}")
    port = free_port()
    argv = [str(BRISK_BIN), "serve", "--model", MODEL_NAME, "--host", "127.0.0.1",
            "--port", str(port), "--ctx-size", "2048", "--max-seqs", "4", "--threads", "1",
            "--drain-timeout", str(drain_timeout_s)]
    server = Server(name=name, argv=argv, port=port, log_path=tmp_path / f"{name}.log")
    server.start("/ready")
    return server


def render_haproxy_config(frontend_port: int, stats_port: int, replicas: list[Server],
                          admin_socket: Path) -> str:
    """The shipped config with loopback addresses: the frontend, the stats page and one `server`
    line per replica (the shipped lines' options kept); plus a runtime API socket for the test."""
    text = HAPROXY_CONFIG.read_text()
    text, n_globals = re.subn(r"(?m)^global$",
                              f"global\n    stats socket {admin_socket} mode 600 level admin", text)
    assert n_globals == 1, f"{HAPROXY_CONFIG} has no global section"
    text, n_frontends = re.subn(r"(?m)^(\s*bind) :8000$", rf"\1 127.0.0.1:{frontend_port}", text)
    text, n_stats = re.subn(r"(?m)^(\s*bind) 127\.0\.0\.1:8404$", rf"\1 127.0.0.1:{stats_port}",
                            text)
    servers = list(re.finditer(r"(?m)^(\s*server )(\S+) (\S+)(.*)$", text))
    assert (n_frontends, n_stats, len(servers)) == (1, 1, len(replicas)), \
        f"{HAPROXY_CONFIG} changed shape: one frontend, one stats page, {len(replicas)} servers"
    for match, replica in reversed(list(zip(servers, replicas))):
        line = f"{match[1]}{replica.name} {replica.host_port}{match[4]}"
        text = text[:match.start()] + line + text[match.end():]
    return text


class HAProxy:
    def __init__(self, tmp_path: Path, replicas: list[Server]):
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            pytest.fail("haproxy not found: install Debian's haproxy package (make deps)",
                        pytrace=False)
        self.port, self.stats_port = free_port(), free_port()
        self.config = tmp_path / "haproxy.cfg"
        self.admin_socket = tmp_path / "haproxy.sock"
        self.config.write_text(
            render_haproxy_config(self.port, self.stats_port, replicas, self.admin_socket))
        check = subprocess.run([haproxy, "-c", "-f", str(self.config)], capture_output=True,
                               text=True, timeout=WAIT_S)
        assert check.returncode == 0, f"haproxy -c:\n{check.stdout}{check.stderr}"
        self.log_path = tmp_path / "haproxy.log"
        self.argv = [haproxy, "-db", "-f", str(self.config)]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HAProxy:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def servers(self) -> dict[str, dict]:
        """The backend's servers from the stats CSV: name → row (status, stot, hrsp_5xx, ...)."""
        r = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5)
        rows = csv.DictReader(r.text.lstrip("# ").splitlines())
        return {row["svname"]: row for row in rows
                if row["pxname"] == "brisk_replicas" and row["svname"] not in ("BACKEND",)}

    def wait_for_status(self, wanted: dict[str, str]) -> None:
        deadline = time.monotonic() + WAIT_S
        seen = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"haproxy exited:\n{self.log_tail()}"
            try:
                seen = {name: row["status"] for name, row in self.servers().items()}
                if all(seen.get(name) == status for name, status in wanted.items()):
                    return
            except httpx.TransportError as e:
                seen = repr(e)
            time.sleep(0.1)
        pytest.fail(f"haproxy: servers {seen} after {WAIT_S}s, expected {wanted}\n"
                    f"{self.log_tail()}")

    def command(self, line: str) -> str:
        """A command on HAProxy's runtime API (management.txt), e.g. `disable health b/s`."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.admin_socket))
            sock.sendall(line.encode() + b"\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        return answer.decode()

    def log_tail(self, n_chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n_chars:]

    def completion_log(self) -> list[dict]:
        """One entry per completion request in the HTTP log: when HAProxy got it (epoch seconds),
        the server that answered last, the status and the retries (`+N` when redispatched)."""
        pattern = re.compile(
            r"\[(?P<date>[^\]]+)\] \S+ brisk_replicas/(?P<server>\S+) \S+ (?P<status>\d+) .*? "
            r"\d+/\d+/\d+/\d+/(?P<retries>\+?\d+) \S+ \"(?P<method>\S+) (?P<path>\S+)")
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            m = pattern.search(line)
            if m and m["path"] == COMPLETIONS:
                received = datetime.strptime(m["date"], "%d/%b/%Y:%H:%M:%S.%f").timestamp()
                out.append({"received": received, "server": m["server"],
                            "status": int(m["status"]), "retries": m["retries"]})
        return out


def _bench(haproxy: HAProxy, out_dir: Path, log: Path) -> subprocess.Popen:
    argv = [str(BRISK_BIN), "bench", "--url", haproxy.url, "--model", MODEL_NAME,
            "--concurrency", str(BENCH_USERS), "--duration", str(BENCH_DURATION_S),
            "--warmup-requests", str(WARMUP_REQUESTS), "--input-tokens", "32",
            "--output-tokens", str(OUTPUT_TOKENS), "--timeout", "30", "--progress", "off",
            "--out", str(out_dir)]
    with open(log, "wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_until_served(replica: Server, n_requests: int, bench: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while get_metrics(replica).get(FINISHED, 0) < n_requests:
        assert bench.poll() is None, "brisk bench ended before the replica served anything"
        assert time.monotonic() < deadline, f"{replica.name} served nothing in {WAIT_S}s"
        time.sleep(0.1)


def test_a_replica_drains_behind_haproxy_and_no_client_request_fails(tmp_path):
    replicas: list[Server] = []
    bench = None
    try:
        replicas = [_start_replica(tmp_path, name) for name in ("replica1", "replica2")]
        victim, survivor = replicas
        with HAProxy(tmp_path, replicas) as haproxy:
            haproxy.wait_for_status({"replica1": "UP", "replica2": "UP"})
            out_dir = tmp_path / "bench"
            bench = _bench(haproxy, out_dir, tmp_path / "bench.log")
            _wait_until_served(victim, 3, bench)
            survivor_at_sigterm = get_metrics(survivor).get(FINISHED, 0)
            sigterm_at = time.time()
            victim.proc.send_signal(signal.SIGTERM)
            haproxy.wait_for_status({"replica1": "DOWN"})
            down_at = time.time()
            victim_exit = victim.proc.wait(timeout=DRAIN_TIMEOUT_S + 10)
            assert bench.poll() is None, "the replica was stopped after the run: nothing tested"
            bench_exit = bench.wait(timeout=BENCH_DURATION_S + 60)
            bench_output = (tmp_path / "bench.log").read_text(errors="replace")
            survivor_at_end = get_metrics(survivor).get(FINISHED, 0)
            stats = haproxy.servers()
            served = haproxy.completion_log()
    finally:
        if bench is not None and bench.poll() is None:
            bench.kill()
            bench.wait(timeout=10)
        for replica in replicas:
            replica.terminate()
            replica.kill()

    assert victim_exit == 0, f"the drained replica exited with {victim_exit}\n{victim.log_tail()}"
    run = json.loads((out_dir / "result.json").read_text())["runs"][0]
    rows = list(csv.DictReader((out_dir / "requests.csv").open()))
    by_server = Counter(entry["server"] for entry in served)
    after_down = Counter(e["server"] for e in served if e["received"] > down_at)
    summary = (
        f"bench: {run['requests']}, errors {run['errors']}; statuses "
        f"{dict(Counter(row['status'] for row in rows))}; haproxy served {dict(by_server)} "
        f"({dict(after_down)} after replica1 was down, "
        f"{down_at - sigterm_at:.2f}s after SIGTERM), statuses "
        f"{dict(Counter(e['status'] for e in served))}, retried "
        f"{[e['retries'] for e in served if e['retries'] != '0']}; per server "
        + ", ".join(f"{name}: {row['stot']} sessions, {row['hrsp_5xx']} 5xx, "
                    f"{row['wretr']} retries, {row['wredis']} redispatches"
                    for name, row in stats.items()))
    print(summary)
    (tmp_path / "summary.txt").write_text(summary + "\n")

    assert bench_exit == 0, bench_output[-3000:]
    assert run["requests"]["failed"] == 0 and run["errors"] == {}, f"{summary}\n{bench_output}"
    assert rows and all(row["status"] == "200" and row["error"] == "" for row in rows), summary
    assert all(int(row["completion_tokens"]) == OUTPUT_TOKENS for row in rows), summary
    # HAProxy saw exactly the bench's requests, each answered 200 once.
    assert len(served) == len(rows) + WARMUP_REQUESTS, summary
    assert all(entry["status"] == 200 for entry in served), summary
    # Both replicas served; after the drain only the survivor did, and its counters grew.
    assert by_server["replica1"] > 0 and after_down["replica2"] > 0, summary
    assert after_down["replica1"] == 0, summary
    assert survivor_at_end > survivor_at_sigterm, summary
    assert survivor_at_end == by_server["replica2"], summary




def get_metrics_via(client: httpx.Client) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return parse_metrics(r.text)


def _refuses_connections(replica: Server) -> bool:
    try:
        socket.create_connection(("127.0.0.1", replica.port), timeout=2).close()
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        return True  # refused, or reset by a listener closing as it was reached


def test_requests_that_reach_a_draining_replica_are_retried_on_another(tmp_path):
    """The window between SIGTERM and HAProxy's health check marking the replica down, held open
    by disabling that replica's checks: requests sent to it get a refused connection (brisk closes
    its listener) or, on a kept-alive connection, a 503 `shutting_down`. Neither started, and
    HAProxy retries both on the other replica: the client sees only 200s."""
    replicas: list[Server] = []
    clients: list[httpx.Client] = []
    long_request: dict = {}
    worker = None
    try:
        # The long request below must outlast the requests sent while it drains, even on a fast
        # machine, and finish within the drain on a slow one.
        replicas = [_start_replica(tmp_path, name, drain_timeout_s=LONG_DRAIN_TIMEOUT_S)
                    for name in ("replica1", "replica2")]
        victim = replicas[0]
        with HAProxy(tmp_path, replicas) as haproxy:
            haproxy.wait_for_status({"replica1": "UP", "replica2": "UP"})
            clients = [httpx.Client(base_url=haproxy.url, timeout=30) for _ in range(2)]
            body = {"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1}
            for client in clients * 2:  # kept-alive connections to both replicas
                assert client.post(COMPLETIONS, json=body).status_code == 200
            # A connection of the test's own to the victim, opened now: its /metrics stays
            # readable while it drains (its listener is closed then).
            victim_client = httpx.Client(base_url=victim.base_url, timeout=10)
            clients.append(victim_client)
            get_metrics_via(victim_client)

            def run_long_request():
                r = httpx.post(victim.base_url + COMPLETIONS, timeout=LONG_DRAIN_TIMEOUT_S,
                               json={"model": MODEL_NAME, "prompt": "Once",
                                     "max_tokens": LONG_REQUEST_TOKENS, "ignore_eos": True})
                long_request.update(status=r.status_code, body=r.json())

            worker = threading.Thread(target=run_long_request)
            worker.start()  # keeps the victim draining while the requests below arrive
            deadline = time.monotonic() + WAIT_S
            while get_metrics_via(victim_client)["brisk_requests_running"] != 1:
                assert time.monotonic() < deadline, "the long request never started"
                time.sleep(0.05)
            answer = haproxy.command("disable health brisk_replicas/replica1")
            assert not answer.strip(), f"haproxy: {answer}"
            victim.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + WAIT_S
            while not _refuses_connections(victim):
                assert time.monotonic() < deadline, "the victim never closed its listener"
                time.sleep(0.05)
            statuses = [clients[i % 2].post(COMPLETIONS, json=body).status_code for i in range(8)]
            refused_while_draining = get_metrics_via(victim_client).get(SHUTTING_DOWN, 0)
            worker.join(timeout=LONG_DRAIN_TIMEOUT_S)
            victim_exit = victim.proc.wait(timeout=LONG_DRAIN_TIMEOUT_S)
            stats = haproxy.servers()
            served = haproxy.completion_log()[4:]  # after the four that opened the connections
    finally:
        for client in clients:
            client.close()
        for replica in replicas:
            replica.terminate()
            replica.kill()
        if worker is not None:
            worker.join(timeout=LONG_DRAIN_TIMEOUT_S)

    summary = (f"statuses {statuses}; served by {[(e['server'], e['retries']) for e in served]}; "
               f"replica1 answered {refused_while_draining:g} with 503 shutting_down; "
               + ", ".join(f"{name}: {row['hrsp_5xx']} 5xx, {row['wretr']} retries, "
                           f"{row['wredis']} redispatches" for name, row in stats.items()))
    print(summary)
    assert statuses == [200] * 8, summary
    # The draining replica may still serve, whole, a request it admitted in the moment between
    # the signal and its scheduler closing admission (seen once in CI); every other one is the
    # survivor's.
    assert all(e["status"] == 200 and (e["server"] == "replica2" or e["retries"] == "0")
               for e in served), summary
    # HAProxy sent some to the draining replica and retried each elsewhere. The replica refused
    # them with a 503 on a kept-alive connection or with a closed one, whichever HAProxy's
    # connection pool happened to hold (CI saw a run with six redispatches and no 503); the 503s
    # it did answer are among the redispatches (HAProxy's hrsp_5xx counts only final answers, so
    # the victim's own counter tells). The 503 itself is test_lifecycle's.
    assert 0 < int(stats["replica1"]["wredis"]), summary
    assert refused_while_draining <= int(stats["replica1"]["wredis"]), summary
    # The request it had admitted finished whole; then it exited cleanly.
    assert long_request["status"] == 200, long_request
    assert long_request["body"]["usage"]["completion_tokens"] == LONG_REQUEST_TOKENS
    assert victim_exit == 0, victim.log_tail()


class _ExitingReplica:
    """A backend that ends the way a replica's process does: it answers /ready and the first
    completion on each connection, then closes the connection under the second one without a
    byte of answer (what a kept-alive connection to a brisk serve whose drain just ended sees).
    The race this stands for is a matter of microseconds with a real replica; here it happens on
    every run, so the shipped config's answer to it is tested, not hoped for."""

    def __init__(self, name: str):
        self.name = name
        self.port = free_port()
        self.host_port = f"127.0.0.1:{self.port}"
        self.answered = 0
        self.closed_unanswered = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._serve_requests(conn)
        except OSError:
            pass  # a health check's connection, reset by HAProxy once it has its answer

    def _serve_requests(self, conn: socket.socket) -> None:
        completions_here = 0
        pending = b""
        with conn:
            conn.settimeout(WAIT_S)
            while True:
                while b"\r\n\r\n" not in pending:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                head, pending = pending.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                               if line.lower().startswith("content-length:")), 0)
                while len(pending) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                pending = pending[length:]
                if method == "POST" and path == COMPLETIONS:
                    completions_here += 1
                    if completions_here == 2:
                        with self._lock:
                            self.closed_unanswered += 1
                        return  # `with conn` closes it: the request is never answered
                    body = json.dumps({"id": "cmpl-exiting", "object": "text_completion",
                                       "model": MODEL_NAME,
                                       "choices": [{"index": 0, "text": "ok",
                                                    "finish_reason": "length"}]}).encode()
                    with self._lock:
                        self.answered += 1
                else:
                    body = b'{"status":"ready"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def test_a_request_on_a_connection_its_replica_closes_unanswered_is_retried(tmp_path):
    """brisk bench saw one request `disconnected` in a drain run (1 in ~10 runs): HAProxy had sent
    it on a kept-alive connection to the replica as the replica's process ended, and closed the
    client's connection unanswered. The shipped config retries such a request (empty-response)."""
    replicas = [_ExitingReplica("replica1"), _ExitingReplica("replica2")]
    try:
        with HAProxy(tmp_path, replicas) as haproxy:
            haproxy.wait_for_status({"replica1": "UP", "replica2": "UP"})
            # One replica only, so the second request is sure to go down the same connection.
            haproxy.command("disable server brisk_replicas/replica2")
            haproxy.wait_for_status({"replica2": "MAINT"})
            request = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 1}
            with httpx.Client(base_url=haproxy.url, timeout=WAIT_S) as client:
                statuses = [client.post(COMPLETIONS, json=request).status_code for _ in range(3)]
            served = haproxy.completion_log()
    finally:
        for replica in replicas:
            replica.close()
    summary = (f"statuses {statuses}; replica1 answered {replicas[0].answered}, closed "
               f"{replicas[0].closed_unanswered} unanswered; haproxy log {served}")
    assert replicas[0].closed_unanswered >= 1, f"the race was not set up: {summary}"
    assert statuses == [200, 200, 200], summary
    assert replicas[0].answered == 3 and replicas[1].answered == 0, summary
    assert [entry["status"] for entry in served] == [200, 200, 200], summary
    assert sum(entry["retries"] not in ("0", "+0") for entry in served) >= 1, summary
