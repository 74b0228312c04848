"""Sampling as clients use it: OpenAI logprobs on both APIs (whole and streamed, checked against
llama-server's), the server's defaults for requests that name no parameter
(--generation-config / --override-generation-config), and where a step's time goes."""

from __future__ import annotations

import concurrent.futures
import json
import math
import re
import subprocess

import openai
import pytest

from conftest import (
    BRISK_BIN,
    MODEL_NAME,
    _start_brisk,
    _stop_and_check_clean_exit,
    completion,
    completion_text,
    get_metrics,
    stream_sse,
    sse_lines,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

CHAT = [{"role": "user", "content": "Name three colors."}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client() as c:
        yield c


@pytest.fixture(scope="module")
def sdk(brisk):
    return openai.OpenAI(base_url=brisk.base_url + "/v1", api_key="unused")


# --- logprobs ------------------------------------------------------------------------------------


def test_chat_logprobs_with_the_openai_sdk(sdk):
    response = sdk.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
        top_logprobs=3, extra_body={"ignore_eos": True},
    )
    choice = response.choices[0]
    content = choice.logprobs.content
    assert len(content) == response.usage.completion_tokens == 8
    assert b"".join(bytes(entry.bytes) for entry in content).decode() == choice.message.content
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        top = [alternative.logprob for alternative in entry.top_logprobs]
        assert top == sorted(top, reverse=True)
        # greedy: the chosen token is the most likely one
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)
        assert sum(math.exp(lp) for lp in top) <= 1.0 + 1e-4


def test_chat_logprobs_false_or_absent_gives_null(sdk):
    response = sdk.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=4)
    assert response.choices[0].logprobs is None


def test_completion_logprobs_legacy_shape(client):
    body = completion(client, PROMPT, max_tokens=6, ignore_eos=True, logprobs=2)
    choice = body["choices"][0]
    logprobs = choice["logprobs"]
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert len(logprobs["token_logprobs"]) == len(logprobs["tokens"]) == 6
    offsets = [0]
    for token in logprobs["tokens"][:-1]:
        offsets.append(offsets[-1] + len(token.encode()))
    assert logprobs["text_offset"] == offsets
    for chosen, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert 1 <= len(top) <= 2
        assert chosen == pytest.approx(max(top.values()))  # greedy


def test_sampled_tokens_carry_their_own_logprob(client):
    # At temperature 1 the chosen token is often not the most likely one; its logprob must be
    # its own, never above the best alternative's.
    body = completion(client, "Write a word:", max_tokens=16, ignore_eos=True, temperature=1.0,
                      seed=3, logprobs=1)
    logprobs = body["choices"][0]["logprobs"]
    for chosen, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert chosen <= max(top.values()) + 1e-5


@pytest.mark.parametrize("path,payload", [
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 2}),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 2}),
], ids=["chat", "completions"])
def test_streamed_logprobs_equal_the_whole_response(client, path, payload):
    payload = {"model": MODEL_NAME, "max_tokens": 10, "temperature": 0, "ignore_eos": True,
               **payload}
    whole = client.post(path, json=payload).json()["choices"][0]["logprobs"]
    stream = stream_sse(client, path, {**payload, "stream": True})
    assert stream.status == 200 and stream.done
    if path.endswith("chat/completions"):
        streamed = [entry for chunk in stream.chunks for choice in chunk["choices"]
                    if choice.get("logprobs") for entry in choice["logprobs"]["content"]]
        assert [e["token"] for e in streamed] == [e["token"] for e in whole["content"]]
        assert [e["logprob"] for e in streamed] == pytest.approx(
            [e["logprob"] for e in whole["content"]], abs=1e-5)
    else:
        streamed = [token for chunk in stream.chunks for choice in chunk["choices"]
                    if choice.get("logprobs") for token in choice["logprobs"]["tokens"]]
        assert streamed == whole["tokens"]
        offsets = [o for chunk in stream.chunks for choice in chunk["choices"]
                   if choice.get("logprobs") for o in choice["logprobs"]["text_offset"]]
        assert offsets == whole["text_offset"]


def test_logprobs_agree_with_llama_server(client, llama_server):
    payload = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
               "logprobs": 3, "ignore_eos": True}
    ours = client.post("/v1/completions", json=payload).json()["choices"][0]["logprobs"]
    with llama_server.client() as reference_client:
        # its prompt cache would reuse another test's KV, and batched numerics differ slightly
        reference = reference_client.post(
            "/v1/completions", json={**payload, "cache_prompt": False}).json()["choices"][0]
    # llama-server answers completions in chat's shape: {"content": [{token, logprob, ...}]}
    reference = reference["logprobs"]["content"]
    # Greedy text can part at a near-tie; compare the tokens up to there.
    compared = 0
    for i, (mine, theirs) in enumerate(zip(ours["tokens"], reference)):
        if mine != theirs["token"]:
            break
        assert ours["token_logprobs"][i] == pytest.approx(theirs["logprob"], abs=2e-3)
        assert set(ours["top_logprobs"][i]) == {t["token"] for t in theirs["top_logprobs"]}
        for alternative in theirs["top_logprobs"]:
            assert ours["top_logprobs"][i][alternative["token"]] == pytest.approx(
                alternative["logprob"], abs=2e-3)
        compared += 1
    assert compared >= 4, (ours["tokens"], [t["token"] for t in reference])


# --- penalties -----------------------------------------------------------------------------------

REPETITIVE = "one two one two one two one two one two one two one"


def test_presence_and_frequency_penalties_steer_every_greedy_token(client):
    """Each greedy token is the best of the model's own logprobs less the penalties of what the
    answer already holds (OpenAI's formula): checked at every position from the 20 best."""
    presence, frequency = 0.4, 0.7
    plain = completion(client, REPETITIVE, max_tokens=16, temperature=0, ignore_eos=True)
    result = completion(client, REPETITIVE, max_tokens=16, temperature=0, ignore_eos=True,
                        logprobs=20, presence_penalty=presence, frequency_penalty=frequency)
    logprobs = result["choices"][0]["logprobs"]
    assert result["choices"][0]["text"] != plain["choices"][0]["text"], "no penalty took effect"
    counts: dict[str, int] = {}
    checked = 0
    for token, alternatives in zip(logprobs["tokens"], logprobs["top_logprobs"]):
        def penalized(t: str) -> float:
            n = counts.get(t, 0)
            return alternatives[t] - frequency * n - (presence if n else 0.0)
        best = max(alternatives, key=penalized)
        if token in alternatives:
            assert penalized(token) >= penalized(best) - 1e-3, (token, best, counts)
            checked += 1
        counts[token] = counts.get(token, 0) + 1
    assert checked >= 12, logprobs["tokens"]


def test_the_openai_sdks_penalties_are_honoured(sdk):
    response = sdk.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=8,
                                           presence_penalty=0.5, frequency_penalty=0.5)
    assert response.choices[0].message.content


def test_repeat_penalty_gives_llama_servers_greedy_text(client, llama_server):
    """llama-server's repeat_penalty over its last repeat_last_n tokens of prompt and answer."""
    payload = {"model": MODEL_NAME, "prompt": REPETITIVE, "max_tokens": 16, "temperature": 0,
               "ignore_eos": True, "repeat_penalty": 1.8, "repeat_last_n": 8}
    ours = client.post("/v1/completions", json=payload)
    assert ours.status_code == 200, ours.text
    plain = completion_text(client, REPETITIVE, max_tokens=16, temperature=0, ignore_eos=True)
    with llama_server.client() as reference_client:
        reference = reference_client.post("/v1/completions",
                                          json={**payload, "cache_prompt": False})
    assert reference.status_code == 200, reference.text
    text = ours.json()["choices"][0]["text"]
    assert text != plain, "the penalty changed nothing"
    assert text == reference.json()["choices"][0]["text"]


@pytest.mark.parametrize("fields, param", [
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": "high"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 1.1, "repeat_penalty": 1.2}, "repeat_penalty"),
    ({"repeat_last_n": -2}, "repeat_last_n"),
])
def test_a_bad_penalty_is_a_400_naming_it(client, fields, param):
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


# --- server defaults -----------------------------------------------------------------------------


def test_defaults_fill_what_a_request_leaves_out(tmp_path_factory, client):
    greedy = completion_text(client, PROMPT, max_tokens=12, ignore_eos=True)
    server = _start_brisk(tmp_path_factory, "brisk-greedy-defaults",
                          ["--override-generation-config", '{"temperature": 0, "max_tokens": 5}'],
                          api_key=None)
    try:
        with server.client() as greedy_client:
            # names no sampling parameter and no max_tokens: both come from the server
            r = greedy_client.post("/v1/completions", json={"prompt": PROMPT, "ignore_eos": True})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["usage"]["completion_tokens"] == 5
            assert greedy.startswith(body["choices"][0]["text"])
            # a field the request names wins over the default
            r = greedy_client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12,
                                                            "ignore_eos": True})
            assert r.json()["choices"][0]["text"] == greedy
    finally:
        _stop_and_check_clean_exit(server)


@pytest.mark.parametrize("flags,needle", [
    (["--override-generation-config", "{\"temprature\": 1}"], "temprature"),
    (["--override-generation-config", "not json"], "JSON object"),
    (["--override-generation-config", "{\"top_p\": 2}"], "top_p"),
    (["--generation-config", "vllm"], "generation-config"),
], ids=["unknown-field", "not-json", "out-of-range", "unknown-preset"])
def test_bad_generation_config_is_a_startup_error(flags, needle):
    result = subprocess.run([str(BRISK_BIN), "serve", "--port", "0", *flags],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert needle in result.stderr, result.stderr


# --- where a step's time goes ----------------------------------------------------------------------


def test_step_phases_are_on_metrics(brisk, client):
    completion(client, PROMPT, max_tokens=4, ignore_eos=True)
    metrics = get_metrics(brisk)
    steps = metrics["brisk_step_duration_seconds_count"]
    assert steps > 0
    for phase in ("schedule", "decode", "sample", "commit"):
        assert metrics[f'brisk_step_phase_seconds_count{{phase="{phase}"}}'] == steps
        assert metrics[f'brisk_step_phase_seconds_sum{{phase="{phase}"}}'] >= 0
    assert metrics['brisk_step_phase_seconds_sum{phase="decode"}'] > 0


# --- KV layout -------------------------------------------------------------------------------------


def test_per_sequence_kv_limits_each_request_to_its_share(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-per-sequence-kv",
                          ["--no-kv-unified", "--max-seqs", "4"],  # --ctx-size 4096
                          api_key=None)
    try:
        with server.client() as per_sequence:
            models = per_sequence.get("/v1/models").json()
            assert models["data"][0]["max_model_len"] == 1024  # 4096 cells / 4 sequences
            long_prompt = "one two three four five six seven eight " * 150
            r = per_sequence.post("/v1/completions", json={"prompt": long_prompt, "max_tokens": 4})
            assert r.status_code == 400 and "1024" in r.json()["error"]["message"], r.text
            # four at once, each in its own KV stream
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                bodies = list(pool.map(
                    lambda i: per_sequence.post("/v1/completions", json={
                        "prompt": f"Request {i}: {PROMPT}", "max_tokens": 16,
                        "ignore_eos": True}).json(), range(4)))
            assert [b["usage"]["completion_tokens"] for b in bodies] == [16] * 4
    finally:
        _stop_and_check_clean_exit(server)


def test_one_sequence_at_a_time_keeps_a_seeded_text_whatever_else_is_sent(tmp_path_factory):
    """docs/api.md's guarantee for reproducible seeds: with --max-seqs 1 every request runs alone,
    with the prefix cache off its whole prompt is computed, and with --target-itl-ms 0 in chunks
    that depend on the prompt alone; a seeded request then gives the same text sent alone, sent
    again and sent among seven others at once. Otherwise it need not: a batch's kernels round
    differently, and a cached prefix leaves a shorter suffix to compute (docs/api.md)."""
    server = _start_brisk(tmp_path_factory, "brisk-one-at-a-time",
                          ["--max-seqs", "1", "--prefix-cache", "off", "--target-itl-ms", "0"],
                          api_key=None)
    story = ("Once upon a time, in a village by the sea, there lived an old fisherman who "
             "mended his nets every morning and told stories to the children every evening. ")
    body = {"prompt": story * 2 + "One day,", "max_tokens": 24,
            "temperature": 1, "seed": 11, "ignore_eos": True}
    try:
        with server.client() as http:
            alone = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
            again = http.post("/v1/completions", json=body).json()
            others = [dict(body, prompt=f"Story {i}: a dragon, a knight and a", seed=i)
                      for i in range(6)]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda b: http.post("/v1/completions", json=b).json(),
                                        [body, *others, body]))
    finally:
        _stop_and_check_clean_exit(server)
    texts = [answers[0]["choices"][0]["text"], answers[-1]["choices"][0]["text"]]
    assert again["choices"][0]["text"] == alone
    assert texts == [alone, alone], (alone, texts)


def _fingerprints(http) -> set[str]:
    """system_fingerprint of a whole completion, a chat and every chunk of a streamed chat."""
    seen = {http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}
                      ).json()["system_fingerprint"],
            http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                   "max_tokens": 2}).json()["system_fingerprint"]}
    with http.stream("POST", "/v1/chat/completions",
                     json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                           "stream": True, "stream_options": {"include_usage": True}}) as r:
        for line in sse_lines(r):
            if line.startswith("data: {"):
                seen.add(json.loads(line[6:])["system_fingerprint"])
    return seen


def test_a_quantized_kv_cache_is_what_llama_cpp_allocates(tmp_path_factory, client):
    # --cache-type-k/-v reach llama.cpp: its own allocation line names the types (and sizes)
    server = _start_brisk(tmp_path_factory, "brisk-kv-q8_0",
                          ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                           "--log-level", "debug"], api_key=None)
    try:
        log = server.log_tail(1_000_000)
        allocated = [line for line in log.splitlines() if "K (" in line and "V (" in line]
        assert allocated and all("K (q8_0)" in line and "V (q8_0)" in line
                                 for line in allocated), log[-4000:]
        with server.client() as quantized:
            r = quantized.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 16,
                                                        "ignore_eos": True})
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 16
            # system_fingerprint: one per configuration, another for another KV cache type
            quantized_fp = _fingerprints(quantized)
        default_fp = _fingerprints(client)
        assert len(quantized_fp) == 1 and len(default_fp) == 1, (quantized_fp, default_fp)
        assert quantized_fp != default_fp
        assert all(re.fullmatch(r"fp_[0-9a-f]{10}", fp) for fp in quantized_fp | default_fp)
        assert "system_fingerprint fp_" in log and "kv q8_0/q8_0" in log
    finally:
        _stop_and_check_clean_exit(server)


@pytest.mark.parametrize("flag", ["--cache-type-k", "--cache-type-v"])
def test_an_unknown_kv_cache_type_is_a_startup_error(flag):
    result = subprocess.run([str(BRISK_BIN), "serve", "--port", "0", flag, "q9_9"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert flag in result.stderr and "q8_0" in result.stderr, result.stderr


def test_sampling_threads_default_to_one_when_the_model_runs_on_the_cpu(brisk):
    # llama.cpp's CPU workers spin on the other cores; a second sampling thread slowed decode
    assert "sampling threads: 1" in brisk.log_tail(200000), brisk.log_tail()
