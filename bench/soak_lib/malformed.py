"""Malformed requests: bad JSON, wrong JSON types, numbers out of range, unknown routes and
methods, broken HTTP. Each must get a 4xx in the OpenAI error format (the status we expect for
it), or, for bytes that are not HTTP at all, a clean close; never a 2xx, a 5xx or silence."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Callable

from soak_lib import raw_http
from soak_lib.raw_http import ConnectionEnded

ROLE = "malformed"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
OVERSIZED_BODY_BYTES = 9 * 1024 * 1024  # above the default --max-body-bytes (8 MiB)


@dataclass(frozen=True)
class MalformedCase:
    name: str
    build: Callable[[random.Random], bytes]
    statuses: frozenset  # the answers we accept
    may_close: bool = False  # a clean close without an answer is also right


def chat(**fields) -> dict:
    return {"messages": MESSAGES, "max_tokens": 4, **fields}


def text(**fields) -> dict:
    return {"prompt": "hi", "max_tokens": 4, **fields}


def _json_case(name: str, path: str, payload, status: int = 400) -> MalformedCase:
    return MalformedCase(name, lambda _rng: raw_http.json_request(path, payload),
                         frozenset({status}))


def _body_case(name: str, path: str, body: bytes, status: int = 400) -> MalformedCase:
    return MalformedCase(name, lambda _rng: raw_http.http_request("POST", path, body),
                         frozenset({status}))


def _raw_case(name: str, data: bytes, statuses=(400,), may_close=False) -> MalformedCase:
    return MalformedCase(name, lambda _rng: data, frozenset(statuses), may_close)


WRONG_TYPES = [
    _json_case("type:max_tokens=str", CHAT, chat(max_tokens="x")),
    _json_case("type:max_tokens=float", CHAT, chat(max_tokens=1.5)),
    _json_case("type:max_completion_tokens=list", CHAT, chat(max_completion_tokens=[4])),
    _json_case("type:messages=int", CHAT, {"messages": 5}),
    _json_case("type:messages=str", CHAT, {"messages": "hi"}),
    _json_case("type:message=str", CHAT, {"messages": ["hi"]}),
    _json_case("type:role=int", CHAT, {"messages": [{"role": 5, "content": "hi"}]}),
    _json_case("type:content=int", CHAT, {"messages": [{"role": "user", "content": 5}]}),
    _json_case("type:content_part=int", CHAT,
               {"messages": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]}),
    _json_case("type:stop=object", CHAT, chat(stop={})),
    _json_case("type:stop=list_of_int", CHAT, chat(stop=[1])),
    _json_case("type:temperature=list", CHAT, chat(temperature=[])),
    _json_case("type:top_p=str", COMPLETIONS, text(top_p="0.5")),
    _json_case("type:top_k=float", COMPLETIONS, text(top_k=1.5)),
    _json_case("type:min_p=object", CHAT, chat(min_p={})),
    _json_case("type:seed=str", CHAT, chat(seed="x")),
    _json_case("type:stream=str", CHAT, chat(stream="yes")),
    _json_case("type:stream_options=int", CHAT, chat(stream=True, stream_options=5)),
    _json_case("type:include_usage=str", CHAT,
               chat(stream=True, stream_options={"include_usage": "yes"})),
    _json_case("type:n=str", CHAT, chat(n="2")),
    _json_case("type:ignore_eos=int", COMPLETIONS, text(ignore_eos=1)),
    _json_case("type:model=int", CHAT, chat(model=5)),
    _json_case("type:prompt=object", COMPLETIONS, {"prompt": {"a": 1}, "max_tokens": 4}),
    _json_case("type:prompt=nested_list", COMPLETIONS, {"prompt": [[[1, 2]]], "max_tokens": 4}),
    _json_case("type:logprobs=str", COMPLETIONS, text(logprobs="5")),
    _json_case("type:chat_logprobs=int", CHAT, chat(logprobs=1)),
    _json_case("type:body=array", CHAT, [1, 2, 3]),
    _json_case("type:body=string", COMPLETIONS, "hi"),
    _json_case("type:body=null", CHAT, None),
    _json_case("type:tokenize_add_special=str", "/tokenize", {"content": "hi", "add_special": "y"}),
]

OUT_OF_RANGE = [
    _json_case("range:max_tokens=0", CHAT, chat(max_tokens=0)),
    _json_case("range:max_tokens=-1", COMPLETIONS, text(max_tokens=-1)),
    _json_case("range:max_tokens=1e9", COMPLETIONS, text(max_tokens=10**9)),
    _json_case("range:max_tokens=2^64-1", CHAT, chat(max_tokens=2**64 - 1)),
    _json_case("range:temperature=-1", CHAT, chat(temperature=-1)),
    _json_case("range:temperature=1e308", COMPLETIONS, text(temperature=1e308)),
    _json_case("range:top_p=5", CHAT, chat(top_p=5)),
    _json_case("range:top_k=-5", COMPLETIONS, text(top_k=-5)),
    _json_case("range:min_p=2", CHAT, chat(min_p=2)),
    _json_case("range:n=17", CHAT, chat(n=17)),  # n is 1-16 per prompt
    _json_case("range:logprobs=1000", COMPLETIONS, text(logprobs=1000)),
    _json_case("range:top_logprobs=50", CHAT, chat(logprobs=True, top_logprobs=50)),
    _json_case("range:token_id=-1", COMPLETIONS, {"prompt": [-1], "max_tokens": 4}),
    _json_case("range:token_id=1e12", COMPLETIONS, {"prompt": [10**12], "max_tokens": 4}),
    _json_case("range:stop=17_strings", CHAT, chat(stop=[str(i) for i in range(17)])),
    _json_case("semantic:messages=[]", CHAT, {"messages": [], "max_tokens": 4}),
    _json_case("semantic:no_prompt", COMPLETIONS, {"max_tokens": 4}),
    _json_case("semantic:prompt=''", COMPLETIONS, text(prompt="")),
    _json_case("semantic:role=tool", CHAT, {"messages": [{"role": "tool", "content": "hi"}]}),
    _json_case("semantic:unknown_model", CHAT, chat(model="no-such-model"), status=404),
    # tokenized before it is refused, so it costs the server real work
    _json_case("semantic:prompt_longer_than_context", COMPLETIONS,
               text(prompt="hello " * 9000)),
]

BAD_BODIES = [
    _body_case("json:truncated", CHAT, b'{"messages": [{"role": "user",'),
    _body_case("json:not_json", COMPLETIONS, b"this is not json"),
    _body_case("json:trailing_comma", CHAT, b'{"messages": [], }'),
    _body_case("json:single_quotes", CHAT, b"{'messages': 1}"),
    _body_case("json:number_overflow", CHAT, b'{"messages": [], "max_tokens": 1e400}'),
    _body_case("json:NaN", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], '
                                 b'"temperature": NaN}'),
    _body_case("json:trailing_garbage", CHAT, json.dumps(chat()).encode() + b" garbage"),
    _body_case("json:deep_nesting", CHAT, b"[" * 100000 + b"]" * 100000),
    _body_case("json:deep_nesting_in_field", CHAT,
               b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    MalformedCase("json:empty_body", lambda _rng: raw_http.http_request(
        "POST", CHAT, headers={"Content-Type": "application/json"}, content_length=0),
        frozenset({400})),
    _body_case("utf8:invalid_in_content", CHAT,
               b'{"messages": [{"role": "user", "content": "caf\xc3\x28 \xff"}]}'),
    _body_case("utf8:overlong", COMPLETIONS, b'{"prompt": "\xc0\xaf", "max_tokens": 4}'),
    _body_case("utf8:lone_surrogate_escape", CHAT,
               b'{"messages": [{"role": "user", "content": "hi\\ud800"}], "max_tokens": 4}'),
    _body_case("utf8:invalid_in_key", CHAT, b'{"mess\xffages": [], "max_tokens": 4}'),
]

ROUTES = [
    _raw_case("route:unknown_get", raw_http.http_request("GET", "/v1/does-not-exist"), (404,)),
    _raw_case("route:unknown_post", raw_http.json_request("/admin", {}), (404,)),
    _raw_case("route:root", raw_http.http_request("GET", "/"), (404,)),
    _raw_case("route:options_star", raw_http.http_request("OPTIONS", "*"), (404,)),
    _raw_case("method:get_chat", raw_http.http_request("GET", CHAT), (405,)),
    _raw_case("method:delete_completions", raw_http.http_request("DELETE", COMPLETIONS), (405,)),
    _raw_case("method:put_chat", raw_http.json_request(CHAT, chat()).replace(b"POST", b"PUT", 1),
              (405,)),
    _raw_case("method:invented_verb", raw_http.http_request("BREW", COMPLETIONS), (405,)),
    _raw_case("method:post_metrics", raw_http.json_request("/metrics", {}), (405,)),
]


def _garbage_line(rng: random.Random) -> bytes:
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    return junk.replace(b"\r\n\r\n", b"") + b"\r\n\r\n"


def _oversized_header(rng: random.Random) -> bytes:
    return raw_http.http_request("GET", "/health", headers={
        "X-Padding": "a" * rng.randint(17 * 1024, 64 * 1024)})


def _many_headers(rng: random.Random) -> bytes:
    return raw_http.http_request("GET", "/health", headers={
        f"X-Junk-{i}": "y" * 20 for i in range(rng.randint(800, 3000))})


def _oversized_body(rng: random.Random) -> bytes:
    # Declared, not sent: the limit must be enforced from Content-Length, before the body.
    body_start = b'{"prompt": "' + b"x" * rng.randint(0, 4096)
    return raw_http.http_request("POST", COMPLETIONS, body_start,
                                 content_length=OVERSIZED_BODY_BYTES)


PROTOCOL = [
    MalformedCase("http:garbage_request_line", _garbage_line, frozenset({400, 404, 405}),
                  may_close=True),
    _raw_case("http:no_version", b"GET\r\n\r\n"),
    _raw_case("http:tls_hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
              may_close=True),
    _raw_case("http:http2_preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    _raw_case("http:version_9.9", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n"),
    _raw_case("http:header_without_colon", b"GET /health HTTP/1.1\r\nHost x\r\n\r\n"),
    _raw_case("http:nul_in_target", b"GET /he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n"),
    _raw_case("http:negative_content_length",
              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"),
    _raw_case("http:huge_content_length",
              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 40 +
              b"\r\n\r\n", (400, 413)),
    _raw_case("http:content_length_and_chunked",
              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    _raw_case("http:bad_chunk_size",
              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"zz\r\n", may_close=True),
    MalformedCase("http:oversized_header", _oversized_header, frozenset({400, 431})),
    MalformedCase("http:many_headers", _many_headers, frozenset({400, 431})),
    MalformedCase("http:oversized_body", _oversized_body, frozenset({413})),
]

CASES = WRONG_TYPES + OUT_OF_RANGE + BAD_BODIES + ROUTES + PROTOCOL
EXPECT_CONTINUE = "http:expect_100_continue_without_body"


@dataclass
class MalformedLimits:
    port: int
    answer_timeout_s: float  # an error answer that takes longer than this is a hang
    read_timeout_s: float  # the server's --read-timeout
    stall_margin_s: float


def judge(case: MalformedCase, response: raw_http.RawResponse) -> tuple[str, str | None]:
    """(outcome, violation or None) for an answer to a malformed request."""
    outcome = raw_http.answer_outcome(response)
    if raw_http.overload_refusal(response.status, raw_http.error_code(response)):
        return outcome, raw_http.judge_overload(response)  # refused before it was read
    if response.status >= 500:
        return outcome, f"5xx for malformed input: {response.body[:200]!r}"
    if response.status not in case.statuses:
        return outcome, (f"status {response.status}, want {sorted(case.statuses)}: "
                         f"{response.body[:200]!r}")
    problem = raw_http.openai_error_problem(response)
    return outcome, (f"{response.status} without an OpenAI error body: {problem}"
                     if problem else None)


async def send_case(limits: MalformedLimits, rng: random.Random, case: MalformedCase, log) -> None:
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    try:
        try:
            await raw_http.send(writer, case.build(rng))
            response = await raw_http.read_response(reader, limits.answer_timeout_s)
        except ConnectionEnded as e:
            if e.kind == "eof" and case.may_close:
                return log.record(ROLE, case.name, "clean_close")
            if e.kind == "timeout":
                return log.record(ROLE, case.name, "no_answer",
                                  f"no answer within {limits.answer_timeout_s:.0f}s")
            return log.record(ROLE, case.name, f"ended_{e.kind}",
                              f"connection ended ({e.kind}) instead of a 4xx: {e.partial[:200]!r}")
        log.record(ROLE, case.name, *judge(case, response))
        if response.keeps_alive and rng.random() < 0.3:
            await _follow_up_on_same_connection(limits, reader, writer, log)
    finally:
        raw_http.close(writer)


async def _follow_up_on_same_connection(limits, reader, writer, log) -> None:
    """After an error on a kept-alive connection, the next request on it must work: the
    server must not have left part of the bad request in its parser."""
    try:
        await raw_http.send(writer, raw_http.http_request("GET", "/health"))
        response = await raw_http.read_response(reader, limits.answer_timeout_s)
    except ConnectionEnded as e:
        return log.record(ROLE, "follow_up_after_error", f"ended_{e.kind}",
                          "a kept-alive connection failed its next request after an error")
    if response.status == 200:
        return log.record(ROLE, "follow_up_after_error", "follow_up_ok")
    log.record(ROLE, "follow_up_after_error", f"follow_up_http_{response.status}",
               f"/health answered {response.status} on a connection kept alive after an error")


async def expect_continue_without_body(limits: MalformedLimits, rng: random.Random, log) -> None:
    """Announces a body with Expect: 100-continue and never sends it; the server may say
    "100 Continue", and must drop the connection after --read-timeout."""
    reader, writer = await raw_http.connect(limits.port, limits.answer_timeout_s)
    head = raw_http.http_request("POST", CHAT, headers={
        "Content-Type": "application/json", "Expect": "100-continue"}, content_length=64)
    try:
        await raw_http.send(writer, head)
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            return log.record(ROLE, EXPECT_CONTINUE, "client_closed")
        bound_s = limits.read_timeout_s + limits.stall_margin_s
        ended, waited_s, received = await raw_http.wait_for_server_close(reader, bound_s)
        final = received.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
        if ended == "timeout":
            return log.record(ROLE, EXPECT_CONTINUE, "not_dropped",
                              f"still connected after {waited_s:.0f}s")
        if final and not final.startswith(b"HTTP/1.1 4") and b"too_many_connections" not in final:
            return log.record(ROLE, EXPECT_CONTINUE, "bad_answer", f"answered {final[:200]!r}")
        log.record(ROLE, EXPECT_CONTINUE, f"dropped_by_server_{ended}")
    finally:
        raw_http.close(writer)


async def malformed_client(limits: MalformedLimits, rng: random.Random, log) -> None:
    index = rng.randrange(len(CASES) + 1)
    name = EXPECT_CONTINUE if index == len(CASES) else CASES[index].name
    try:
        if index == len(CASES):
            await expect_continue_without_body(limits, rng, log)
        else:
            await send_case(limits, rng, CASES[index], log)
    except (OSError, asyncio.TimeoutError) as e:
        log.record(ROLE, name, f"connection_error:{type(e).__name__}", f"{e!r}")
