"""Greedy output of brisk matches llama.cpp's own tools on the same model file, under
concurrency too, and its token accounting matches llama.cpp's tokenizer."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import (
    LLAMA_COMPLETION_BIN,
    MODEL_NAME,
    THREADS,
    completion,
    completion_text,
    model_path,
    require_file,
    stream_sse,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

REFERENCE_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little robot who",
    "def fibonacci(n):\n",
]
REFERENCE_TOKENS = 32

CONCURRENT_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little robot who",
    "def fibonacci(n):\n",
    "The three primary colors are",
    "Water boils at",
    "My favourite recipe for pancakes:",
    "In 1969, the first humans",
    "Q: What is the largest planet?\nA:",
]
CONCURRENT_TOKENS = 16


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client() as c:
        yield c


@pytest.fixture(scope="module")
def ref_client(llama_server):
    with llama_server.client() as c:
        yield c


def llama_completion(prompt: str, n_tokens: int) -> str:
    require_file(LLAMA_COMPLETION_BIN, "build the llama.cpp reference tools first (make)")
    argv = [
        str(LLAMA_COMPLETION_BIN), "-m", str(model_path()), "-p", prompt, "-n", str(n_tokens),
        "--temp", "0", "-no-cnv", "--no-display-prompt", "--simple-io", "-t", str(THREADS),
        "--ignore-eos", "-c", "4096", "--no-warmup",
    ]
    p = subprocess.run(argv, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    out = p.stdout.decode("utf-8")
    # llama-completion always prints "\n\n" after the generated text (LOG("\n\n") at exit)
    assert out.endswith("\n\n"), f"unexpected llama-completion output: {out!r}"
    return out[:-2]


def llama_server_text(ref_client: httpx.Client, prompt: str, n_tokens: int) -> str:
    r = ref_client.post(
        "/v1/completions",
        json={"prompt": prompt, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True,
              "cache_prompt": False},
    )
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


@pytest.mark.parametrize("prompt", REFERENCE_PROMPTS, ids=["france", "robot", "code"])
def test_greedy_matches_llama_cpp(client, ref_client, prompt):
    ours = completion_text(client, prompt, max_tokens=REFERENCE_TOKENS, ignore_eos=True)
    cli = llama_completion(prompt, REFERENCE_TOKENS)
    server = llama_server_text(ref_client, prompt, REFERENCE_TOKENS)
    assert cli == server, (
        "llama-completion and llama-server disagree with each other, so the reference itself is "
        f"unstable:\ncli:    {cli!r}\nserver: {server!r}"
    )
    assert ours == cli, f"\nbrisk:            {ours!r}\nllama-completion: {cli!r}"


def test_chat_matches_llama_server(client, ref_client):
    for messages in (
        [{"role": "user", "content": "Name three colors."}],
        [{"role": "system", "content": "Answer in French."},
         {"role": "user", "content": "What is the capital of Italy?"}],
    ):
        payload = {"messages": messages, "max_tokens": 24, "temperature": 0}
        ours = client.post("/v1/chat/completions", json=payload)
        ref = ref_client.post("/v1/chat/completions", json={**payload, "cache_prompt": False})
        assert ours.status_code == 200 and ref.status_code == 200, (ours.text, ref.text)
        ours, ref = ours.json(), ref.json()
        assert ours["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"], (
            f"chat template renders differently: brisk {ours['usage']} vs llama-server "
            f"{ref['usage']} for {messages}"
        )
        assert (ours["choices"][0]["message"]["content"]
                == ref["choices"][0]["message"]["content"]), (ours, ref)
        assert ours["choices"][0]["finish_reason"] == ref["choices"][0]["finish_reason"]


# Batching may change a greedy text only where the model nearly tied: at the first token that
# differs, the token chosen in the batch must be among the alone run's five best, at most this
# many nats below its best. llama.cpp's batched kernels round differently from single-sequence
# ones (a matmul over 8 rows sums in another order, attention runs tiled or per row): measured
# on SmolLM2 (2026-12-06), a token's log-probability moved by up to 0.13 nats between a prompt
# run alone and among 8, enough to swap two candidates 0.02-0.2 nats apart. A scheduling bug
# (a token lost, repeated, or computed on another sequence's cells) changes a text where the
# model had no doubt.
TIE_NATS = 0.5


def _greedy_runs(client_factory, prompts, n_tokens, concurrent: bool) -> list[dict]:
    """Each prompt's greedy completion with its five best tokens at every position."""
    def one(prompt):
        with client_factory() as c:
            r = c.post("/v1/completions",
                       json={"prompt": prompt, "max_tokens": n_tokens, "temperature": 0,
                             "ignore_eos": True, "logprobs": 5})
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert len(choice["logprobs"]["tokens"]) == n_tokens, choice
            return {"text": choice["text"], **choice["logprobs"]}

    if not concurrent:
        return [one(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(one, prompts))


def _first_difference(alone: dict, together: dict) -> tuple[int, float] | None:
    """Where two greedy runs of a prompt part, and by how much the alone run preferred its own
    token there over the batch's (inf when the batch's token was not among its five best)."""
    for k, (a, b) in enumerate(zip(alone["tokens"], together["tokens"])):
        if a != b:
            top = alone["top_logprobs"][k]
            return k, (top[a] - top[b]) if b in top else float("inf")
    return None


def test_concurrent_greedy_departs_from_sequential_only_at_near_ties(brisk):
    alone = _greedy_runs(brisk.client, CONCURRENT_PROMPTS, CONCURRENT_TOKENS, concurrent=False)
    together = _greedy_runs(brisk.client, CONCURRENT_PROMPTS, CONCURRENT_TOKENS, concurrent=True)
    departures = {i: _first_difference(a, b) for i, (a, b) in enumerate(zip(alone, together))}
    departures = {i: d for i, d in departures.items() if d is not None}
    report = "\n".join(
        f"  {CONCURRENT_PROMPTS[i]!r}: token {k}, {gap:.3f} nats\n"
        f"    alone:    {alone[i]['text']!r}\n    together: {together[i]['text']!r}"
        for i, (k, gap) in departures.items())
    print(f"greedy texts that batching changed: {len(departures)} of {len(CONCURRENT_PROMPTS)}"
          + ("\n" + report if report else ""))
    assert all(gap <= TIE_NATS for _, gap in departures.values()), (
        f"batching changed a greedy text where the model did not nearly tie (> {TIE_NATS} "
        f"nats):\n{report}")


@pytest.mark.parametrize("prompt", REFERENCE_PROMPTS[:2], ids=["france", "robot"])
def test_streaming_equals_non_streaming_completion(client, prompt):
    plain = completion(client, prompt, max_tokens=24, ignore_eos=True)
    res = stream_sse(client, "/v1/completions",
                     {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 24, "temperature": 0,
                      "ignore_eos": True, "stream": True,
                      "stream_options": {"include_usage": True}})
    assert res.status == 200 and res.done
    assert res.text() == plain["choices"][0]["text"]
    assert res.usage_chunk()["usage"] == plain["usage"]
    assert res.finish_reason() == plain["choices"][0]["finish_reason"] == "length"


def test_streaming_equals_non_streaming_chat(client):
    payload = {"model": MODEL_NAME, "temperature": 0, "max_tokens": 40,
               "messages": [{"role": "user", "content": "Write a haiku about the sea."}]}
    plain = client.post("/v1/chat/completions", json=payload).json()
    res = stream_sse(client, "/v1/chat/completions",
                     {**payload, "stream": True, "stream_options": {"include_usage": True}})
    assert res.text() == plain["choices"][0]["message"]["content"]
    assert res.usage_chunk()["usage"] == plain["usage"]
    assert res.finish_reason() == plain["choices"][0]["finish_reason"]


@pytest.mark.parametrize("prompt", [
    "Hello",
    "The capital of France is",
    "Ünïcödé tëxt — with “quotes”, emoji 🚀 and 中文字符.",
    "  leading spaces and\ttabs\n\nand newlines  ",
])
def test_prompt_tokens_match_llama_tokenizer(client, ref_client, prompt):
    r = ref_client.post("/tokenize", json={"content": prompt, "add_special": True})
    assert r.status_code == 200, r.text
    expected = len(r.json()["tokens"])
    body = completion(client, prompt, max_tokens=1)
    assert body["usage"]["prompt_tokens"] == expected, (prompt, body["usage"])


@pytest.mark.parametrize("n", [1, 7, 33])
def test_completion_tokens_equal_max_tokens_with_ignore_eos(client, n):
    body = completion(client, "Count: one, two,", max_tokens=n, ignore_eos=True)
    assert body["usage"]["completion_tokens"] == n
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + n


def test_unicode_output_survives_streaming(client):
    # Multi-byte characters split across tokens must arrive whole, in order.
    prompt = "Translate to Japanese: Good morning, how are you? Japanese:"
    plain = completion_text(client, prompt, max_tokens=24, ignore_eos=True)
    res = stream_sse(client, "/v1/completions",
                     {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 24, "temperature": 0,
                      "ignore_eos": True, "stream": True})
    assert "\ufffd" not in res.text() or "\ufffd" in plain
    assert res.text() == plain
