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

SYSTEM = ("You answer questions about the solar system in one short sentence, with no "
          "preamble. " * 12)
QUESTIONS = ["Which planet is largest?", "Which planet is closest to the Sun?",
             "Which planet has rings?"]
TOKENS = 16
MODELS = {"gemma3": (MODEL_NAME, MODEL_FILE), "smollm2": (SECOND_MODEL_NAME, SECOND_MODEL_FILE)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def servers(request, tmp_path_factory):
    """The same model served with the prefix cache on and off, one at a time (2 cores)."""
    model = MODELS[request.param]
    yield model, lambda cache: _start_brisk(
        tmp_path_factory, f"brisk-prefix-{request.param}-{cache}",
        ["--max-seqs", "4", "--prefix-cache", cache], api_key=None, model=model)


def conversation(server, model_name: str) -> tuple[list[str], list[int]]:
    """Three questions under one system prompt, then a second turn of the last one; the greedy
    answers and the prompt tokens each reused."""
    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120)
    answers, cached = [], []
    history = [{"role": "system", "content": SYSTEM}]
    for question in QUESTIONS + ["And which one is smallest?"]:
        messages = (history + [{"role": "user", "content": question}]
                    if question in QUESTIONS else history)
        reply = client.chat.completions.create(
            model=model_name, messages=messages, max_tokens=TOKENS, temperature=0)
        answer = reply.choices[0].message.content
        answers.append(answer)
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        if question == QUESTIONS[-1]:
            history = messages + [{"role": "assistant", "content": answer},
                                  {"role": "user", "content": "And which one is smallest?"}]
    return answers, cached


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

    assert answers_on == answers_off, f"{model[0]}: the cache changed the greedy text"
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
