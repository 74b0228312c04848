"""The OpenAI-compatible surface of `brisk serve`: routes, response shapes, parameters,
streaming, the official openai SDK and curl."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import httpx
import openai
import pytest

from conftest import (
    MODEL_NAME,
    assert_openai_error,
    assert_timings,
    assert_usage,
    completion,
    completion_text,
    stream_sse,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client() as c:
        yield c


# --- plain routes ------------------------------------------------------------------------------


def test_health(client):
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_ready(client):
    assert client.get("/ready").status_code == 200


def test_models_lists_served_model(client):
    r = client.get("/v1/models")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body.get("object") == "list", body
    ids = [m.get("id") for m in body["data"]]
    assert ids == [MODEL_NAME], body
    assert body["data"][0].get("object") == "model", body


# --- completions ---------------------------------------------------------------------------------


def test_completion_shape_and_usage(client):
    t0 = time.monotonic()
    body = completion(client, PROMPT, max_tokens=8)
    wall_ms = (time.monotonic() - t0) * 1000
    assert body["object"] == "text_completion", body
    assert isinstance(body.get("id"), str) and body["id"], body
    assert isinstance(body.get("created"), int), body
    assert body["model"] == MODEL_NAME, body
    assert len(body["choices"]) == 1, body
    choice = body["choices"][0]
    assert choice["index"] == 0
    assert isinstance(choice["text"], str) and choice["text"], body
    assert choice["finish_reason"] in ("stop", "length"), body
    assert_usage(body["usage"])
    assert body["usage"]["completion_tokens"] <= 8
    assert_timings(body, body["usage"], wall_ms)


def test_completion_ignore_eos_generates_exactly_max_tokens(client):
    body = completion(client, PROMPT, max_tokens=12, ignore_eos=True)
    assert body["usage"]["completion_tokens"] == 12, body["usage"]
    assert body["choices"][0]["finish_reason"] == "length", body


def test_model_may_be_omitted(client):
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == MODEL_NAME


def test_echo_puts_the_prompt_first_whole_and_streamed(client):
    plain = completion(client, PROMPT, max_tokens=6, temperature=0)
    echoed = completion(client, PROMPT, max_tokens=6, temperature=0, echo=True)
    assert echoed["choices"][0]["text"] == PROMPT + plain["choices"][0]["text"], echoed
    assert echoed["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"], echoed
    res = stream_sse(client, "/v1/completions",
                     {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "echo": True,
                      "stream": True})
    assert res.text() == echoed["choices"][0]["text"], res.raw_lines
    # Token ids: the prompt's text comes back.
    ids = client.post("/tokenize", json={"content": "Hello world", "add_special": False}).json()
    body = completion(client, ids["tokens"], max_tokens=2, temperature=0, echo=True)
    assert body["choices"][0]["text"].startswith("Hello world"), body
    err = assert_openai_error(client.post("/v1/completions", json={
        "prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 2}), 400)
    assert err["param"] == "echo", err


def test_n_equal_one_is_accepted(client):
    body = completion(client, PROMPT, max_tokens=3, n=1)
    assert len(body["choices"]) == 1


def test_completion_stream_format(client):
    res = stream_sse(
        client,
        "/v1/completions",
        {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 10, "temperature": 0,
         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert res.status == 200, res.raw_lines
    assert res.headers.get("content-type", "").startswith("text/event-stream"), res.headers
    assert res.done, "stream did not end with data: [DONE]"
    assert res.chunks, "no chunks"
    ids = {c.get("id") for c in res.chunks}
    assert len(ids) == 1, f"chunks carry different ids: {ids}"
    for c in res.chunks:
        assert c["object"] == "text_completion", c
        assert c["model"] == MODEL_NAME, c
    assert res.finish_reason() == "length"
    last = res.chunks[-1]
    assert last["choices"] == [], f"final usage chunk should have empty choices: {last}"
    assert_usage(last["usage"])
    assert last["usage"]["completion_tokens"] == 10
    assert_timings(last, last["usage"])
    # usage appears only in the final chunk
    assert all(not c.get("usage") for c in res.chunks[:-1]), res.chunks
    assert res.text() == completion_text(client, PROMPT, max_tokens=10, ignore_eos=True)


def test_completion_stream_without_usage_has_timings_on_finish_chunk(client):
    res = stream_sse(
        client,
        "/v1/completions",
        {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 5, "temperature": 0,
         "ignore_eos": True, "stream": True},
    )
    assert res.status == 200 and res.done, res.raw_lines
    finish = [c for c in res.chunks if any(ch.get("finish_reason") for ch in c["choices"])]
    assert len(finish) == 1, res.chunks
    assert_timings(finish[-1])
    assert finish[-1]["brisk_timings"]["completion_tokens"] == 5
    assert all(c["choices"] for c in res.chunks), "empty-choices chunk without include_usage"


# --- chat ----------------------------------------------------------------------------------------


def test_chat_shape_and_usage(client):
    r = client.post(
        "/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": CHAT, "max_tokens": 16, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion", body
    assert body["model"] == MODEL_NAME
    assert isinstance(body.get("id"), str) and body["id"]
    assert isinstance(body.get("created"), int)
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant", body
    assert isinstance(msg["content"], str) and msg["content"].strip(), body
    # the template's end-of-turn marker must not leak into the text
    assert "<end_of_turn>" not in msg["content"] and "<start_of_turn>" not in msg["content"]
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert_usage(body["usage"])
    assert_timings(body, body["usage"])


def test_chat_max_completion_tokens(client):
    r = client.post(
        "/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": CHAT, "max_completion_tokens": 5,
              "temperature": 0, "ignore_eos": True},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 5, body["usage"]
    assert body["choices"][0]["finish_reason"] == "length"


def test_chat_stream_format(client):
    res = stream_sse(
        client,
        "/v1/chat/completions",
        {"model": MODEL_NAME, "messages": CHAT, "max_tokens": 12, "temperature": 0,
         "stream": True, "stream_options": {"include_usage": True}},
    )
    assert res.status == 200 and res.done, res.raw_lines
    for c in res.chunks:
        assert c["object"] == "chat.completion.chunk", c
    with_choices = [c for c in res.chunks if c["choices"]]
    assert with_choices[0]["choices"][0]["delta"].get("role") in ("assistant", None)
    roles = [c["choices"][0]["delta"].get("role") for c in with_choices]
    assert "assistant" in roles, "no chunk announces role=assistant"
    last = res.chunks[-1]
    assert last["choices"] == [] and last.get("usage"), last
    assert_usage(last["usage"])
    assert_timings(last, last["usage"])
    r = client.post(
        "/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": CHAT, "max_tokens": 12, "temperature": 0},
    )
    assert res.text() == r.json()["choices"][0]["message"]["content"]
    assert res.finish_reason() == r.json()["choices"][0]["finish_reason"]


def test_chat_with_system_and_multi_turn(client):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    r = client.post(
        "/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": messages, "max_tokens": 8, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


# --- sampling parameters -------------------------------------------------------------------------


def test_seed_makes_sampling_reproducible(client):
    params = dict(max_tokens=16, temperature=1.0, top_p=0.95, top_k=40, min_p=0.05, seed=1234,
                  ignore_eos=True)
    a = completion_text(client, "Write a word:", **params)
    b = completion_text(client, "Write a word:", **params)
    assert a == b


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 1.5, "top_k": 1, "seed": 7},
        {"temperature": 1.5, "min_p": 1.0, "seed": 7},
        {"temperature": 1.5, "top_p": 0.000001, "seed": 7},
    ],
    ids=["top_k=1", "min_p=1", "top_p~0"],
)
def test_truncating_samplers_to_one_token_equals_greedy(client, sampling):
    greedy = completion_text(client, "Once upon a time", max_tokens=12, ignore_eos=True)
    sampled = completion_text(client, "Once upon a time", max_tokens=12, ignore_eos=True,
                              **sampling)
    assert sampled == greedy


def test_high_temperature_differs_across_seeds(client):
    texts = {
        completion_text(client, "Write a word:", max_tokens=8, temperature=2.0, seed=s,
                        ignore_eos=True)
        for s in (1, 2, 3, 4)
    }
    assert len(texts) > 1, "four seeds at temperature 2 all gave the same text: seed ignored?"


# --- stop strings --------------------------------------------------------------------------------

STOP_PROMPT = "Once upon a time, there was a little robot who"


@pytest.fixture(scope="module")
def greedy_story(client):
    return completion_text(client, STOP_PROMPT, max_tokens=32, ignore_eos=True)


def _pick_stop(text: str) -> str:
    # a piece in the middle of the text, starting at its first occurrence
    for k in range(len(text) // 3, len(text) - 6):
        cand = text[k:k + 5]
        if cand.strip() and text.find(cand) == k:
            return cand
    pytest.skip(f"no usable stop string in {text!r}")


def test_stop_string(client, greedy_story):
    stop = _pick_stop(greedy_story)
    body = completion(client, STOP_PROMPT, max_tokens=32, ignore_eos=True, stop=stop)
    expected = greedy_story[: greedy_story.find(stop)]
    assert body["choices"][0]["text"] == expected, f"stop={stop!r}"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] < 32


def test_stop_list(client, greedy_story):
    stop = _pick_stop(greedy_story)
    body = completion(client, STOP_PROMPT, max_tokens=32, ignore_eos=True,
                      stop=["@@never-appears@@", stop])
    assert body["choices"][0]["text"] == greedy_story[: greedy_story.find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_stop_string_streaming_does_not_leak_stop_text(client, greedy_story):
    stop = _pick_stop(greedy_story)
    res = stream_sse(
        client,
        "/v1/completions",
        {"model": MODEL_NAME, "prompt": STOP_PROMPT, "max_tokens": 32, "temperature": 0,
         "ignore_eos": True, "stop": [stop], "stream": True},
    )
    assert res.status == 200 and res.done
    assert res.text() == greedy_story[: greedy_story.find(stop)], f"stop={stop!r}"
    assert res.finish_reason() == "stop"


def test_stop_absent_from_output_runs_to_length(client, greedy_story):
    body = completion(client, STOP_PROMPT, max_tokens=32, ignore_eos=True, stop="@@never@@")
    assert body["choices"][0]["text"] == greedy_story
    assert body["choices"][0]["finish_reason"] == "length"


# --- the official openai SDK ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk(brisk):
    return openai.OpenAI(base_url=brisk.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def test_sdk_models(sdk):
    assert [m.id for m in sdk.models.list()] == [MODEL_NAME]


def test_sdk_chat(sdk):
    resp = sdk.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0
    )
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_sdk_completion(sdk):
    resp = sdk.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert resp.choices[0].text
    assert resp.usage.completion_tokens == 6
    assert resp.choices[0].finish_reason == "length"


def test_sdk_streaming_chat_with_usage(sdk):
    stream = sdk.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                pieces.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert pieces, "no content streamed"
    assert usage is not None, "no usage chunk with include_usage"
    assert 0 < usage.completion_tokens <= 10
    assert finish in ("stop", "length")
    plain = sdk.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=10,
                                        temperature=0)
    assert "".join(pieces) == plain.choices[0].message.content


# --- curl ----------------------------------------------------------------------------------------


def _curl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    if not shutil.which("curl"):
        pytest.fail("curl is not installed (apt-get install curl)")
    return subprocess.run(["curl", "-sS", *args], capture_output=True, text=True, timeout=timeout)


def test_curl_chat(brisk):
    payload = {"model": MODEL_NAME, "messages": CHAT, "max_tokens": 8, "temperature": 0}
    p = _curl("-w", "\n%{http_code}", "-H", "Content-Type: application/json",
              "-d", json.dumps(payload), brisk.base_url + "/v1/chat/completions")
    assert p.returncode == 0, p.stderr
    body, _, code = p.stdout.rpartition("\n")
    assert code == "200", p.stdout
    assert json.loads(body)["choices"][0]["message"]["content"]


def test_curl_streaming_chat(brisk):
    payload = {"model": MODEL_NAME, "messages": CHAT, "max_tokens": 8, "temperature": 0,
               "stream": True}
    p = _curl("-N", "-H", "Content-Type: application/json", "-d", json.dumps(payload),
              brisk.base_url + "/v1/chat/completions")
    assert p.returncode == 0, p.stderr
    events = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert events[-1] == "data: [DONE]", events[-3:]
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(e.startswith("data: ") for e in events), events
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text


# --- keep-alive ----------------------------------------------------------------------------------


def test_keep_alive_serves_several_requests_on_one_connection(brisk):
    with httpx.Client(base_url=brisk.base_url, timeout=60,
                      limits=httpx.Limits(max_connections=1)) as c:
        for _ in range(3):
            assert c.get("/health").status_code == 200
            r = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
            assert r.status_code == 200, r.text
