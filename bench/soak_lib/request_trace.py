"""Where a well-behaved request got to (httpcore's trace events), and, when one is stuck, which
server-side sockets hold bytes the server has not read: evidence for a hang, client or server."""

from __future__ import annotations

import asyncio
import subprocess
import time

SENT = "http11.send_request_body.complete"
HEAD = "http11.receive_response_headers.complete"


class RequestTrace:
    """httpx's `trace` extension: records each event of one request with its time."""

    def __init__(self):
        self.started = time.perf_counter()
        self.events: list[tuple[str, float]] = []
        self.local_port: int | None = None  # known when this request opened the connection
        self.sent = asyncio.Event()
        self.head = asyncio.Event()

    async def __call__(self, name: str, info: dict) -> None:
        self.events.append((name, time.perf_counter()))
        if name == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                self.local_port = sock.getsockname()[1]
        if name == SENT:
            self.sent.set()
        elif name == HEAD:
            self.head.set()

    def story(self) -> str:
        steps = ", ".join(f"{name.split('.', 1)[1]} +{(t - self.started) * 1e3:.0f}ms"
                          for name, t in self.events)
        connection = (f"new connection from port {self.local_port}" if self.local_port
                      else "reused keep-alive connection")
        return f"{connection}; {steps or 'no step completed'}"


def unread_server_sockets(server_port: int) -> list[str]:
    """Server-side connections whose receive queue holds bytes (ss): a request the server has
    not read. Sampled twice a second apart, so only the ones that stay are reported."""
    def sample() -> set[str]:
        out = subprocess.run(["ss", "-Htn", "state", "established", "sport", f"= :{server_port}"],
                             capture_output=True, text=True, timeout=10).stdout
        held = set()
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[0] != "0":
                held.add(f"peer {fields[3]} recv-q {fields[0]}")
        return held
    try:
        first = sample()
        time.sleep(1)
        return sorted(first & sample())
    except (OSError, subprocess.SubprocessError):
        return ["ss failed"]
