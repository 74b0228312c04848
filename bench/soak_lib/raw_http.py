"""HTTP/1.1 over raw asyncio streams, for clients that must control exactly what goes on the wire
and when the socket closes (a half-sent header, a close before the first byte, a reset)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from dataclasses import dataclass

STREAM_LIMIT_BYTES = 1 << 20
HEAD_END = b"\r\n\r\n"


class ConnectionEnded(Exception):
    """The connection ended before what we waited for. kind: eof (closed before any byte of the
    awaited message), truncated (closed in the middle of it), reset, timeout, garbled."""

    def __init__(self, kind: str, partial: bytes = b""):
        super().__init__(kind)
        self.kind = kind
        self.partial = partial


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes
    interim: list[int]  # 1xx statuses received before the final one

    def json(self):
        return json.loads(self.body)

    @property
    def keeps_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


def http_request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                 content_length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    all_headers = {"Content-Type": "application/json"} if body else {}
    all_headers.update(headers or {})
    if body or content_length is not None:
        all_headers.setdefault("Content-Length",
                               str(len(body) if content_length is None else content_length))
    lines += [f"{name}: {value}" for name, value in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_request(path: str, payload, headers: dict[str, str] | None = None) -> bytes:
    return http_request("POST", path, json.dumps(payload).encode(), headers)


async def connect(port: int, timeout_s: float):
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, limit=STREAM_LIMIT_BYTES), timeout_s)


def close(writer: asyncio.StreamWriter, reset: bool = False) -> None:
    """Closes the socket: with reset, SO_LINGER 0 makes the kernel send RST as a killed client's
    would; otherwise a normal FIN."""
    if reset:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
    writer.close()


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def _guarded(awaitable, timeout_s: float, partial: bytes = b""):
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except asyncio.TimeoutError:
        raise ConnectionEnded("timeout", partial) from None
    except (ConnectionResetError, BrokenPipeError):
        raise ConnectionEnded("reset", partial) from None
    except asyncio.IncompleteReadError as e:
        raise ConnectionEnded("truncated" if e.partial or partial else "eof",
                              partial + e.partial) from None
    except asyncio.LimitOverrunError:
        raise ConnectionEnded("garbled", partial) from None


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ConnectionEnded("garbled", head)
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ConnectionEnded("garbled", head)
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def read_head(reader: asyncio.StreamReader, timeout_s: float) -> tuple[int, dict, list[int]]:
    """Status and headers of the next final response; 1xx interim responses are skipped."""
    interim = []
    while True:
        head = await _guarded(reader.readuntil(HEAD_END), timeout_s)
        status, headers = _parse_head(head[:-len(HEAD_END)])
        if status >= 200:
            return status, headers, interim
        interim.append(status)


async def read_chunked(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    body = b""
    while True:
        size_line = await _guarded(reader.readuntil(b"\r\n"), timeout_s, body)
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise ConnectionEnded("garbled", body + size_line) from None
        if size == 0:
            await _guarded(reader.readuntil(b"\r\n"), timeout_s, body)  # no trailers are sent
            return body
        body += (await _guarded(reader.readexactly(size + 2), timeout_s, body))[:-2]


async def read_body(reader: asyncio.StreamReader, headers: dict, timeout_s: float) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return await read_chunked(reader, timeout_s)
    if "content-length" in headers:
        return await _guarded(reader.readexactly(int(headers["content-length"])), timeout_s)
    return await _guarded(reader.read(), timeout_s)


async def read_response(reader: asyncio.StreamReader, timeout_s: float) -> RawResponse:
    status, headers, interim = await read_head(reader, timeout_s)
    return RawResponse(status, headers, await read_body(reader, headers, timeout_s), interim)


async def wait_for_server_close(reader: asyncio.StreamReader, bound_s: float) -> tuple[str, float,
                                                                                        bytes]:
    """Reads until the server closes the connection: (how it ended: eof, reset or timeout,
    seconds waited, the bytes that came before)."""
    start = time.monotonic()
    received = b""
    try:
        while True:
            remaining = bound_s - (time.monotonic() - start)
            if remaining <= 0:
                return "timeout", time.monotonic() - start, received
            piece = await asyncio.wait_for(reader.read(65536), remaining)
            if not piece:
                return "eof", time.monotonic() - start, received
            received += piece
    except asyncio.TimeoutError:
        return "timeout", time.monotonic() - start, received
    except (ConnectionResetError, BrokenPipeError):
        return "reset", time.monotonic() - start, received


def openai_error_problem(response: RawResponse) -> str | None:
    """Why the body is not an OpenAI error object {"error": {"message", "type", ...}}; None if
    it is one."""
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.body[:120]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return f"no 'error' object: {response.body[:120]!r}"
    if not isinstance(error.get("message"), str) or not error["message"].strip():
        return f"no error.message: {response.body[:120]!r}"
    if not isinstance(error.get("type"), str) or not error["type"]:
        return f"no error.type: {response.body[:120]!r}"
    return None


def error_code(response: RawResponse) -> str | None:
    try:
        code = response.json()["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return None if code is None else str(code)


OVERLOAD_CODES = {429: {"queue_full", "queue_delay", "queued_tokens_full"},
                  503: {"too_many_connections"}}


def overload_refusal(status: int, code: str | None) -> bool:
    """The server refusing work it has no room for (429 queue_full, or queue_delay when the
    estimated wait passes --max-queue-delay-ms; 503 too_many_connections at --max-connections):
    protection, not failure, as long as it says when to retry."""
    return code in OVERLOAD_CODES.get(status, set())


def judge_overload(response: RawResponse) -> str | None:
    """What is wrong with an overload refusal (None: nothing)."""
    problem = openai_error_problem(response)
    if problem:
        return f"{response.status} without an OpenAI error body: {problem}"
    if not response.headers.get("retry-after", "").strip().isdigit():
        return f"{response.status} without Retry-After in seconds"
    return None


def answer_outcome(response: RawResponse) -> str:
    code = error_code(response)
    return f"http_{response.status}" + (f":{code}" if code else "")


def judge_refusal_of_valid_request(response: RawResponse) -> tuple[str, str | None]:
    """(outcome, violation or None) for a non-200 answer to a valid request: only an overload
    refusal is right."""
    outcome = answer_outcome(response)
    if overload_refusal(response.status, error_code(response)):
        return outcome, judge_overload(response)
    kind = "5xx" if response.status >= 500 else "unexpected status"
    return outcome, f"{kind} for a valid request: {response.body[:200]!r}"
