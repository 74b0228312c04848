"""The well-behaved client: a short streaming chat or text completion through httpx, as an
application would send it, checked event by event, with its exact TTFT (request sent -> first
event that carries content)."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

from soak_lib import raw_http
from soak_lib.request_trace import RequestTrace, unread_server_sockets

ROLE = "well_behaved"
PROMPTS = (
    "Name three colors.",
    "Write one sentence about the sea.",
    "What is the capital of France?",
    "Say hello in Spanish.",
    "List two fruits.",
    "Count from one to five.",
    "Describe a cat in a few words.",
    "What day comes after Monday?",
)
# Requests that send no max_tokens stop at the first newline, and the soak starts the server
# with a small --override-generation-config max_tokens, so they end even when no newline comes.
STOP_STRINGS = (["\n"], ["\n", "."])


def request_shape(rng: random.Random) -> tuple[str, dict, int | None]:
    """(path, JSON body, max_tokens or None) of one well-behaved request."""
    prompt = rng.choice(PROMPTS)
    if rng.random() < 0.5:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": f"Q: {prompt}\nA:"}
    body["stream"] = True
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.5:
        body["temperature"] = 0
    max_tokens = None
    if rng.random() < 0.7:
        max_tokens = rng.randint(4, 32)
        body["max_tokens"] = max_tokens
    else:
        body["stop"] = rng.choice(STOP_STRINGS)
    return path, body, max_tokens


def event_content(chunk: dict) -> str:
    for choice in chunk.get("choices") or []:
        if choice.get("text"):
            return choice["text"]
        delta = choice.get("delta") or {}
        if delta.get("content"):
            return delta["content"]
    return ""


class StreamCheck:
    """Follows one SSE stream and says what is wrong with it, if anything."""

    def __init__(self, max_tokens: int | None):
        self.max_tokens = max_tokens
        self.first_content_at: float | None = None
        self.finish_reasons: list[str] = []
        self.done = False
        self.problem: str | None = None

    def feed(self, line: str, now: float) -> None:
        if self.problem or not line.strip() or line.startswith(":"):
            return
        if not line.startswith("data: "):
            self.problem = f"SSE line without 'data: ': {line[:120]!r}"
            return
        data = line[len("data: "):]
        if self.done:
            self.problem = f"data after [DONE]: {data[:120]!r}"
            return
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.problem = f"event is not JSON: {data[:120]!r}"
            return
        if "error" in chunk:
            self.problem = f"error event: {data[:200]}"
            return
        if event_content(chunk) and self.first_content_at is None:
            self.first_content_at = now
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason"):
                self.finish_reasons.append(choice["finish_reason"])
        usage = chunk.get("usage")
        if usage and self.max_tokens and usage.get("completion_tokens", 0) > self.max_tokens:
            self.problem = f"{usage['completion_tokens']} tokens for max_tokens {self.max_tokens}"

    def verdict(self) -> str | None:
        if self.problem:
            return self.problem
        if not self.done:
            return "stream ended without [DONE]"
        if len(self.finish_reasons) != 1 or self.finish_reasons[0] not in ("stop", "length"):
            return f"finish_reason(s) {self.finish_reasons}, want one of stop/length"
        return None


async def _stream_once(client: httpx.AsyncClient, path: str, body: dict, max_tokens, log,
                       started: float, trace: RequestTrace) -> float:
    async with client.stream("POST", path, json=body, extensions={"trace": trace}) as response:
        if response.status_code != 200:
            await response.aread()
            return _record_refusal(response, log)
        content_type = response.headers.get("content-type", "")
        check = StreamCheck(max_tokens)
        if not content_type.startswith("text/event-stream"):
            check.problem = f"content-type {content_type!r}"
        async for line in response.aiter_lines():
            check.feed(line, time.perf_counter())
    finished = time.perf_counter()
    problem = check.verdict()
    if problem:
        log.record(ROLE, path, "broken_stream", problem)
        return 0.0
    ttft_ms = None if check.first_content_at is None else (check.first_content_at - started) * 1e3
    log.record(ROLE, path, "ok" if ttft_ms is not None else "ok_without_content")
    log.record_latency(ttft_ms, (finished - started) * 1e3)
    return 0.0


def _record_refusal(response: httpx.Response, log) -> float:
    """Only an overload refusal (429 queue_full, 503 too_many_connections) is right for a valid
    request; it is the server protecting its latency, and it must say when to retry."""
    path = response.request.url.path
    raw = raw_http.RawResponse(response.status_code, {k.lower(): v for k, v in
                                                      response.headers.items()},
                               response.content, [])
    outcome, violation = raw_http.judge_refusal_of_valid_request(raw)
    log.record(ROLE, path, outcome, violation)
    retry_after = response.headers.get("retry-after", "")
    return float(retry_after) if retry_after.strip().isdigit() else 1.0


async def _answer_head_overdue(trace: RequestTrace, answer_timeout_s: float) -> None:
    """Returns once the request has been sent and no response head followed within
    answer_timeout_s. A stream's head (or a 429) comes when the request is admitted or refused,
    right after it is read, however long the queue: waiting longer means nobody is answering."""
    await trace.sent.wait()
    try:
        await asyncio.wait_for(trace.head.wait(), answer_timeout_s)
    except asyncio.TimeoutError:
        return
    await asyncio.Event().wait()  # answered: never overdue


async def well_behaved_request(client: httpx.AsyncClient, rng: random.Random, log,
                               hang_after_s: float, answer_timeout_s: float,
                               server_port: int) -> float:
    """Sends one request and records its outcome; returns the seconds the server asked this client
    to wait before the next one (Retry-After), else 0."""
    path, body, max_tokens = request_shape(rng)
    started = time.perf_counter()
    trace = RequestTrace()
    request = asyncio.ensure_future(_stream_once(client, path, body, max_tokens, log, started,
                                                 trace))
    overdue = asyncio.ensure_future(_answer_head_overdue(trace, answer_timeout_s))
    try:
        done, _ = await asyncio.wait({request, overdue}, timeout=hang_after_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if request in done:
            return request.result()
        held = await asyncio.to_thread(unread_server_sockets, server_port)
        outcome, bound = ("no_answer_head", answer_timeout_s) if overdue in done else \
            ("hang", hang_after_s)
        log.record(ROLE, path, outcome, f"not answered within {bound:.0f}s: {body}; "
                                        f"{trace.story()}; unread server sockets: {held}")
    except (asyncio.TimeoutError, httpx.TimeoutException):
        log.record(ROLE, path, "hang", f"httpx timeout after {hang_after_s:.0f}s: {body}; "
                                       f"{trace.story()}")
    except httpx.HTTPError as e:
        log.record(ROLE, path, f"connection_error:{type(e).__name__}",
                   f"{e!r} for {body}; {trace.story()}")
    finally:
        for task in (request, overdue):
            task.cancel()
        await asyncio.gather(request, overdue, return_exceptions=True)
    return 0.0
