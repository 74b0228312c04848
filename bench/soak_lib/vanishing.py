"""Clients that vanish: each sends a valid request, or part of one, and closes the socket at a
chosen point, or stalls and waits to see whether the server drops it. Raw sockets, so the close
happens exactly there. The server owes these clients nothing but to free what they held."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

from soak_lib import raw_http
from soak_lib.raw_http import ConnectionEnded

ROLE = "vanishing"
FILLER = ("the quick brown fox jumps over the lazy dog while a small river runs past old stone "
          "houses and children play in the warm evening light near the market square").split()


@dataclass
class VanishLimits:
    port: int
    read_timeout_s: float  # the server's --read-timeout: when it must drop a stalled client
    stall_margin_s: float  # how much later than that still counts as dropped
    answer_timeout_s: float  # how long a response may take to begin before we give up waiting
    hang_after_s: float  # how long an admitted stream may take to send its next event


def _valid_request(rng: random.Random, prompt: str, max_tokens: int, stream: bool = True):
    if rng.random() < 0.5:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update(max_tokens=max_tokens, ignore_eos=True, stream=stream)
    return raw_http.json_request(path, body)


def _long_prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(rng.randint(800, 3000)))


async def _vanish_before_content(limits: VanishLimits, rng: random.Random, request: bytes,
                                 close_after_s: float, log, variant: str) -> None:
    """Sends `request`, closes after close_after_s unless the server has sent content by then."""
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    try:
        await raw_http.send(writer, request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + close_after_s
        try:
            status, headers, _ = await raw_http.read_head(reader, close_after_s)
        except ConnectionEnded as e:
            if e.kind == "timeout":
                return log.record(ROLE, variant, "vanished_before_first_byte")
            return log.record(ROLE, variant, f"server_{e.kind}",
                              f"server ended the connection ({e.kind}) before answering")
        if status != 200:
            body = await raw_http.read_body(reader, headers, limits.answer_timeout_s)
            response = raw_http.RawResponse(status, headers, body, [])
            return log.record(ROLE, variant, *raw_http.judge_refusal_of_valid_request(response))
        if headers.get("content-type", "").startswith("application/json"):
            return log.record(ROLE, variant, "finished_before_vanish")
        # A stream's head goes out at admission; its first event only with the first token.
        try:
            await asyncio.wait_for(reader.readuntil(b"data: "), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            return log.record(ROLE, variant, "vanished_after_head_before_first_event")
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.LimitOverrunError):
            return log.record(ROLE, variant, "server_closed_stream",
                              "a stream ended before its first event")
        log.record(ROLE, variant, "vanished_after_first_event")
    finally:
        raw_http.close(writer, reset=rng.random() < 0.5)


async def vanish_while_queued(limits, rng, log) -> None:
    request = _valid_request(rng, rng.choice(FILLER) + " story:", rng.randint(32, 128),
                                 stream=rng.random() < 0.5)
    await _vanish_before_content(limits, rng, request, rng.uniform(0.0, 1.5), log, "queued")


async def vanish_mid_prefill(limits, rng, log) -> None:
    request = _valid_request(rng, _long_prompt(rng), 16)
    await _vanish_before_content(limits, rng, request, rng.uniform(0.05, 3.0), log, "prefill")


async def vanish_mid_stream(limits, rng, log) -> None:
    events_wanted = rng.randint(1, 8)
    request = _valid_request(rng, "Tell me a long story.", rng.randint(64, 256))
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    try:
        await raw_http.send(writer, request)
        status, headers, _ = await raw_http.read_head(reader, limits.answer_timeout_s)
        if status != 200:
            body = await raw_http.read_body(reader, headers, limits.answer_timeout_s)
            response = raw_http.RawResponse(status, headers, body, [])
            return log.record(ROLE, "stream", *raw_http.judge_refusal_of_valid_request(response))
        received = b""
        while received.count(b"data: ") < events_wanted:
            # admitted, so only as slow as the queue ahead of it: the well-behaved hang bound
            piece = await asyncio.wait_for(reader.read(65536), limits.hang_after_s)
            if not piece:
                return log.record(ROLE, "stream", "server_closed_stream",
                                  f"stream closed after {received.count(b'data: ')} events, "
                                  "before [DONE]")
            received += piece
            if b'data: {"error"' in received:
                return log.record(ROLE, "stream", "error_event", f"error event: {received[-300:]!r}")
            if b"[DONE]" in received:
                return log.record(ROLE, "stream", "finished_before_vanish")
        log.record(ROLE, "stream", "vanished_mid_stream")
    except ConnectionEnded as e:
        log.record(ROLE, "stream", f"server_{e.kind}", f"server ended the connection ({e.kind})")
    except asyncio.TimeoutError:
        log.record(ROLE, "stream", "no_event", f"no event within {limits.hang_after_s:.0f}s")
    finally:
        raw_http.close(writer, reset=rng.random() < 0.5)


def _partial_request(rng: random.Random, cut_in_header: bool) -> bytes:
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    request = raw_http.http_request("POST", "/v1/chat/completions", body)
    head_length = request.index(raw_http.HEAD_END)
    if cut_in_header:
        return request[:rng.randint(1, head_length + 2)]
    return request[:rng.randint(head_length + 4, len(request) - 1)]


async def _partial_then_close(limits, rng, log, variant: str, cut_in_header: bool) -> None:
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    try:
        await raw_http.send(writer, _partial_request(rng, cut_in_header))
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        log.record(ROLE, variant, "client_closed")
    finally:
        raw_http.close(writer, reset=rng.random() < 0.5)


async def _partial_then_stall(limits, rng, log, variant: str, cut_in_header: bool) -> None:
    """A client that stops sending must be dropped after --read-timeout, or it holds a
    descriptor (and a session) for ever."""
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    bound_s = limits.read_timeout_s + limits.stall_margin_s
    try:
        await raw_http.send(writer, _partial_request(rng, cut_in_header))
        ended, waited_s, received = await raw_http.wait_for_server_close(reader, bound_s)
        if ended == "timeout":
            return log.record(ROLE, variant, "not_dropped",
                              f"a stalled client was still connected after {waited_s:.0f}s "
                              f"(--read-timeout {limits.read_timeout_s:.0f}s)")
        if received.startswith(b"HTTP/1.1 5") and b"too_many_connections" not in received:
            return log.record(ROLE, variant, "http_5xx", f"5xx to a stalled client: {received[:200]!r}")
        log.record(ROLE, variant, f"dropped_by_server_{ended}" + ("_with_answer" if received else ""))
    finally:
        raw_http.close(writer)


async def close_mid_header(limits, rng, log):
    await _partial_then_close(limits, rng, log, "header_close", cut_in_header=True)


async def stall_mid_header(limits, rng, log):
    await _partial_then_stall(limits, rng, log, "header_stall", cut_in_header=True)


async def close_mid_body(limits, rng, log):
    await _partial_then_close(limits, rng, log, "body_close", cut_in_header=False)


async def stall_mid_body(limits, rng, log):
    await _partial_then_stall(limits, rng, log, "body_stall", cut_in_header=False)


VANISH_POINTS = {
    "queued": vanish_while_queued,
    "prefill": vanish_mid_prefill,
    "stream": vanish_mid_stream,
    "header_close": close_mid_header,
    "header_stall": stall_mid_header,
    "body_close": close_mid_body,
    "body_stall": stall_mid_body,
}


async def vanishing_client(limits: VanishLimits, rng: random.Random, log) -> None:
    variant = rng.choice(sorted(VANISH_POINTS))
    try:
        await VANISH_POINTS[variant](limits, rng, log)
    except (ConnectionEnded, OSError, asyncio.TimeoutError) as e:
        log.record(ROLE, variant, f"connection_error:{type(e).__name__}", f"{e!r}")
