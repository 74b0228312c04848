"""The prefix cache on the real models: Gemma 3 (sliding-window layers) and SmolLM2 (full
attention everywhere). A shared system prompt and the turns of a chat reuse cached KV cells, the
greedy text is the same as with the cache off, and /metrics and `usage` say what was reused.
"""

from __future__ import annotations

import pytest
from openai import OpenAI

from conftest import (
    MODEL_FILE, MODEL_NAME, SECOND_MODEL_FILE, SECOND_MODEL_NAME, _start_brisk,
    _stop_and_check_clean_exit, get_metrics,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

SYSTEM = ("You answer questions about the solar system in one short sentence, with no "
          "preamble. " * 12)
QUESTIONS = ["Which planet is largest?", "Which planet is closest to the Sun?",
             "Which planet has rings?"]
TOKENS = 16
MODELS = {"gemma3": (MODEL_NAME, MODEL_FILE), "smollm2": (SECOND_MODEL_NAME, SECOND_MODEL_FILE)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def servers(request, tmp_path_factory):
    """The same model served with the prefix cache on and off, one at a time (2 cores).

    --target-itl-ms 0: chunk sizes then depend on the tokens alone, not on step costs measured
    on a shared machine; CPU kernels round differently for other batch sizes, and a greedy
    token flipped that way (seen under a parallel build) says nothing about the cache."""
    model = MODELS[request.param]
    yield model, lambda cache: _start_brisk(
        tmp_path_factory, f"brisk-prefix-{request.param}-{cache}",
        ["--max-seqs", "4", "--prefix-cache", cache, "--target-itl-ms", "0"], api_key=None,
        model=model)


def conversation(server, model_name: str) -> tuple[list[list[dict]], list[int]]:
    """Three questions under one system prompt, then a second turn of the last one; each greedy
    answer's tokens with their top logprobs, and the prompt tokens each reused."""
    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120)
    answers, cached = [], []
    history = [{"role": "system", "content": SYSTEM}]
    for question in QUESTIONS + ["And which one is smallest?"]:
        messages = (history + [{"role": "user", "content": question}]
                    if question in QUESTIONS else history)
        reply = client.chat.completions.create(
            model=model_name, messages=messages, max_tokens=TOKENS, temperature=0,
            logprobs=True, top_logprobs=3)
        answers.append([t.model_dump() for t in reply.choices[0].logprobs.content])
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        if question == QUESTIONS[-1]:
            history = messages + [{"role": "assistant", "content": reply.choices[0].message.content},
                                  {"role": "user", "content": "And which one is smallest?"}]
    return answers, cached


# The cache changes how a prompt is computed, not what: its suffix is a batch of its own and
# attention runs over a unified KV buffer that also holds other cached sequences (masked), so
# the sums are ordered differently. Measured on SmolLM2: with the cache off but the prompt cut
# at the same token (--max-batched-tokens = the hit), the logprobs equal the cache's exactly
# through the prefill and drift by 0.005-0.04 nats in the decode; in one batch, up to 0.13
# nats, and two greedy choices flipped between tokens 0.001 and 0.18 nats apart. A cache that
# reused wrong cells changes the distribution by whole nats.
TIE_NATS = 0.25


def compare_greedy(on: list[dict], off: list[dict]) -> int | None:
    """Walks two greedy answers: the same token with a logprob within TIE_NATS, up to a first
    flip between two tokens within TIE_NATS of each other in both runs (returned; None when
    the answers are the same). After a flip the answers continue from different text."""
    for i, (a, b) in enumerate(zip(on, off)):
        if a["token"] == b["token"]:
            assert abs(a["logprob"] - b["logprob"]) <= TIE_NATS, (i, a, b)
            continue
        for run, mine, other in (("on", a, b["token"]), ("off", b, a["token"])):
            alternatives = {t["token"]: t["logprob"] for t in mine["top_logprobs"]}
            assert other in alternatives, (run, i, mine, other)
            margin = mine["logprob"] - alternatives[other]
            assert margin <= TIE_NATS, f"cache {run}: {mine['token']!r} beat {other!r} by " \
                                       f"{margin:.3f} nats at token {i}: not a tie"
        return i
    assert len(on) == len(off)
    return None


def compare_conversations(model_name: str, answers: list, answers_off: list) -> None:
    """conversation()'s answers against a cache-off server's, each with compare_greedy, up to
    a flip in the last question's answer: the second turn's prompt holds it, so the runs no
    longer compare after it."""
    for i, (a, b) in enumerate(zip(answers, answers_off)):
        flipped_at = compare_greedy(a, b)
        if flipped_at is not None:
            print(f"{model_name}: answer {i} flipped at a near-tie, token {flipped_at}")
            if i == len(QUESTIONS) - 1:
                break


def test_cached_prefixes_are_reused_and_change_no_greedy_token(servers):
    model, start = servers
    on = start("on")
    try:
        answers_on, cached_on = conversation(on, model[0])
        metrics = get_metrics(on)
    finally:
        _stop_and_check_clean_exit(on)
    off = start("off")
    try:
        answers_off, cached_off = conversation(off, model[0])
        metrics_off = get_metrics(off)
    finally:
        _stop_and_check_clean_exit(off)

    compare_conversations(model[0], answers_on, answers_off)
    # The first answer reuses nothing, so it is computed the same way: token for token equal.
    assert [t["token"] for t in answers_on[0]] == [t["token"] for t in answers_off[0]]
    assert cached_off == [0, 0, 0, 0]
    assert cached_on[0] == 0
    # The system prompt (~200 tokens) is reused by the next questions; the second turn reuses
    # the whole first turn.
    assert all(c >= 150 for c in cached_on[1:]), cached_on
    assert cached_on[3] > cached_on[2], cached_on
    assert metrics["brisk_prefix_cache_hits_total"] == 3
    assert metrics["brisk_prefix_cache_hit_tokens_total"] == sum(cached_on)
    assert metrics['brisk_prefix_cache_misses_total{reason="no_match"}'] == 1
    assert metrics["brisk_prefix_cache_sequences"] >= 1
    assert metrics_off['brisk_prefix_cache_misses_total{reason="disabled"}'] == 4
    assert metrics_off["brisk_prefix_cache_hits_total"] == 0


MOONS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a moon of Mars."}]


def test_a_buffer_per_sequence_reuses_prefixes_in_place_and_by_copy(servers, tmp_path_factory):
    """--no-kv-unified: each sequence has its own buffer and the idle ones are the cache. The
    questions take the previous one's sequence over (its cells stay where they are, the other
    question is freed); the second choice of an n=2 request copies the first's buffer (llama.cpp
    copies a sequence's whole buffer, then brisk trims the copy to the prompt). Greedy text as
    with the cache off; both choices the same."""
    model, start = servers
    per_sequence = _start_brisk(tmp_path_factory, f"brisk-prefix-per-seq-{model[0]}",
                                ["--max-seqs", "4", "--no-kv-unified", "--cache-ram", "0",
                                 "--target-itl-ms", "0"], api_key=None, model=model)
    try:
        answers, cached = conversation(per_sequence, model[0])
        client = OpenAI(base_url=per_sequence.base_url + "/v1", api_key="unused", timeout=120)
        pair = client.chat.completions.create(model=model[0], messages=MOONS, max_tokens=TOKENS,
                                              temperature=0, n=2)
        metrics = get_metrics(per_sequence)
    finally:
        _stop_and_check_clean_exit(per_sequence)
    off = start("off")
    try:
        answers_off, _ = conversation(off, model[0])
        client = OpenAI(base_url=off.base_url + "/v1", api_key="unused", timeout=120)
        alone = client.chat.completions.create(model=model[0], messages=MOONS,
                                               max_tokens=TOKENS, temperature=0)
    finally:
        _stop_and_check_clean_exit(off)
    compare_conversations(model[0], answers, answers_off)
    assert cached[0] == 0
    assert all(c >= 150 for c in cached[1:]), cached
    assert cached[3] > cached[2], cached
    # The n=2 request's prompt shares the system prompt with what the conversation left.
    assert pair.usage.prompt_tokens_details.cached_tokens >= 150
    texts = [c.message.content for c in sorted(pair.choices, key=lambda c: c.index)]
    assert texts[0] == texts[1], texts
    assert texts[0] == alone.choices[0].message.content, (texts[0], alone.choices[0].message)
    assert metrics["brisk_prefix_cache_hits_total"] == 5  # 3 turns, the pair, its second choice
    assert metrics["brisk_prefix_cache_host_saves_total"] == 0


# --- the host tier (--cache-ram) ---------------------------------------------------------------

def test_evicted_prefixes_come_back_from_host_memory_with_the_same_greedy_text(servers,
                                                                                tmp_path_factory):
    """--prefix-cache-trial-seqs 0 frees every finished request's KV cells at once: the later
    questions then find the system prompt only in the host tier, restore it, and answer as a
    server that computes everything."""
    model, start = servers
    host = _start_brisk(tmp_path_factory, f"brisk-host-tier-{model[0]}",
                        ["--max-seqs", "4", "--prefix-cache-trial-seqs", "0", "--cache-ram", "256",
                         "--target-itl-ms", "0"], api_key=None, model=model)
    try:
        answers_host, cached_host = conversation(host, model[0])
        metrics = get_metrics(host)
    finally:
        _stop_and_check_clean_exit(host)
    off = start("off")
    try:
        answers_off, _ = conversation(off, model[0])
    finally:
        _stop_and_check_clean_exit(off)
    compare_conversations(model[0], answers_host, answers_off)
    assert cached_host[0] == 0
    assert all(c >= 150 for c in cached_host[1:]), cached_host
    assert metrics["brisk_prefix_cache_sequences"] == 0  # nothing stays in the KV cache
    assert metrics["brisk_prefix_cache_host_restores_total"] == 3
    assert metrics["brisk_prefix_cache_host_hit_tokens_total"] == sum(cached_host)
    assert metrics["brisk_prefix_cache_host_saves_total"] >= 3
    assert 0 < metrics["brisk_prefix_cache_host_bytes"] <= 256 << 20


def test_a_full_host_tier_evicts_and_stays_within_its_bound(tmp_path_factory):
    """8 MiB holds two of these ~145-token SmolLM2 sequences (~38 KB a token), not three: the
    first topic is gone from both tiers when it comes back."""
    server = _start_brisk(tmp_path_factory, "brisk-host-tier-bound",
                          ["--max-seqs", "2", "--prefix-cache-trial-seqs", "0", "--cache-ram", "8"],
                          api_key=None, model=(SECOND_MODEL_NAME, SECOND_MODEL_FILE))
    try:
        client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120)
        topics = ["river valleys", "mountain passes", "coastal towns", "river valleys"]
        cached = []
        for topic in topics:
            reply = client.completions.create(
                model=SECOND_MODEL_NAME, prompt=f"A long report about {topic}. " * 20,
                max_tokens=4, temperature=0)
            cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        metrics = get_metrics(server)
    finally:
        _stop_and_check_clean_exit(server)
    assert cached == [0, 0, 0, 0], cached  # the first topic was evicted from host memory too
    assert metrics['brisk_prefix_cache_misses_total{reason="host_evicted"}'] == 1
    assert metrics["brisk_prefix_cache_host_evictions_total"] >= 1
    assert 1 <= metrics["brisk_prefix_cache_host_entries"] <= 2
    assert metrics["brisk_prefix_cache_host_bytes"] <= metrics["brisk_prefix_cache_host_capacity_bytes"]
    assert metrics["brisk_prefix_cache_host_capacity_bytes"] == 8 << 20
