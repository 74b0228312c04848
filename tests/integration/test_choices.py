"""`n` > 1 and prompt lists (issue 24): several choices in one response, whole and streamed,
through the official openai SDK. A later choice of a prompt shares the first one's KV cells
(one prefill); usage counts each prompt once.

The seed tests run on SmolLM2 (no sliding window, a chat template of its own): on Gemma 3 a
seed's draws can still change with what the KV cache held before, for one choice as for a
single request (issue 24's reproducibility row)."""

from __future__ import annotations

from collections import defaultdict

import openai
import pytest

from conftest import (
    MODEL_NAME,
    SECOND_MODEL_FILE,
    SECOND_MODEL_NAME,
    _start_brisk,
    _stop_and_check_clean_exit,
    assert_openai_error,
    assert_usage,
    get_metrics,
)

pytestmark = pytest.mark.parallel

PROMPT = "Once upon a time, in a small village by the sea, there lived"
CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]
SAMPLED = dict(temperature=1.0, seed=1234, max_tokens=16)
# Prompts whose greedy continuations have no near-tie: a token computed in a batch of another
# shape (a later choice's last prompt token, two prompts in one step) gives the same text.
COUNTING = ["1, 2, 3, 4, 5,", "A, B, C, D, E,"]


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client() as c:
        yield c


@pytest.fixture(scope="module")
def sdk(brisk):
    return openai.OpenAI(base_url=brisk.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-smollm2-choices", ["--max-seqs", "8"],
                          api_key=None, model=(SECOND_MODEL_NAME, SECOND_MODEL_FILE))
    yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                        timeout=120)
    _stop_and_check_clean_exit(server)


def texts(response) -> list[str]:
    return [c.text if hasattr(c, "text") else c.message.content for c in response.choices]


# --- n > 1, whole responses ------------------------------------------------------------------


def test_n_choices_differ_and_the_response_is_reproducible(smol):
    first = smol.completions.create(model=SECOND_MODEL_NAME, prompt=PROMPT, n=2, **SAMPLED)
    again = smol.completions.create(model=SECOND_MODEL_NAME, prompt=PROMPT, n=2, **SAMPLED)
    assert [c.index for c in first.choices] == [0, 1]
    assert all(c.finish_reason in ("stop", "length") for c in first.choices)
    assert texts(first)[0] != texts(first)[1], "two choices at temperature 1 came out the same"
    assert texts(first) == texts(again), "the same request with the same seed changed"


def test_choice_i_draws_with_seed_plus_i(smol):
    eos = {"extra_body": {"ignore_eos": True}}
    both = smol.completions.create(model=SECOND_MODEL_NAME, prompt=PROMPT, n=2, **SAMPLED, **eos)
    alone = [smol.completions.create(model=SECOND_MODEL_NAME, prompt=PROMPT, n=1, **eos,
                                    **{**SAMPLED, "seed": SAMPLED["seed"] + i}).choices[0].text
             for i in range(2)]
    assert texts(both) == alone


def test_usage_counts_the_prompt_once_and_sums_the_completions(sdk):
    one = sdk.completions.create(model=MODEL_NAME, prompt=COUNTING[0], n=1, max_tokens=6,
                                 temperature=0, extra_body={"ignore_eos": True})
    four = sdk.completions.create(model=MODEL_NAME, prompt=COUNTING[0], n=4, max_tokens=6,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert_usage(four.usage.model_dump())
    assert four.usage.prompt_tokens == one.usage.prompt_tokens
    assert four.usage.completion_tokens == 4 * 6
    assert len(four.choices) == 4
    assert set(texts(four)) == {one.choices[0].text}, "greedy choices are the greedy text"
    assert four.model_extra["brisk_timings"]["completion_tokens"] == 24


def test_later_choices_share_the_first_choices_prompt_cells(brisk, sdk):
    prompt = PROMPT + " an old fisherman who never caught a single fish."
    prompt_tokens = sdk.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1,
                                           temperature=0).usage.prompt_tokens
    before = get_metrics(brisk)
    sdk.completions.create(model=MODEL_NAME, prompt=prompt, n=3, max_tokens=4, temperature=0)
    after = get_metrics(brisk)
    reused = (after["brisk_prefix_cache_hit_tokens_total"]
              - before["brisk_prefix_cache_hit_tokens_total"])
    # The first choice may itself reuse the previous request's cells; each later one copies the
    # first choice's prompt but its last token.
    assert reused >= 2 * (prompt_tokens - 1), (reused, prompt_tokens)


def test_chat_n_choices(sdk):
    r = sdk.chat.completions.create(model=MODEL_NAME, messages=CHAT, n=3, **SAMPLED)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.role == "assistant" for c in r.choices)
    assert len(set(texts(r))) > 1


# --- n > 1, streamed -------------------------------------------------------------------------


def collect(stream):
    pieces, reasons, usage_chunks, roles = defaultdict(str), defaultdict(list), [], defaultdict(int)
    for chunk in stream:
        if chunk.usage is not None:
            usage_chunks.append(chunk.usage)
            assert chunk.choices == [], "the usage chunk carries no choice"
            continue
        assert usage_chunks == [], "a choice's chunk after the usage chunk"
        for choice in chunk.choices:
            if hasattr(choice, "delta"):
                pieces[choice.index] += choice.delta.content or ""
                roles[choice.index] += choice.delta.role == "assistant"
            else:
                pieces[choice.index] += choice.text
            if choice.finish_reason:
                reasons[choice.index].append(choice.finish_reason)
    return pieces, reasons, usage_chunks, roles


def test_streamed_chat_choices_carry_their_index_and_finish_reason(smol):
    eos = {"extra_body": {"ignore_eos": True}}
    stream = smol.chat.completions.create(model=SECOND_MODEL_NAME, messages=CHAT, n=2,
                                          stream=True, stream_options={"include_usage": True},
                                          **SAMPLED, **eos)
    pieces, reasons, usage_chunks, roles = collect(stream)
    assert sorted(pieces) == [0, 1]
    assert pieces[0] and pieces[1] and pieces[0] != pieces[1], pieces
    assert reasons == {0: ["length"], 1: ["length"]}, reasons
    assert dict(roles) == {0: 1, 1: 1}, "each choice's first delta names the role once"
    assert len(usage_chunks) == 1, "one usage chunk, after every choice"
    one = smol.chat.completions.create(model=SECOND_MODEL_NAME, messages=CHAT, max_tokens=1)
    assert usage_chunks[0].prompt_tokens == one.usage.prompt_tokens
    assert usage_chunks[0].completion_tokens == 2 * SAMPLED["max_tokens"]


def test_streamed_completion_choices(sdk):
    stream = sdk.completions.create(model=MODEL_NAME, prompt=COUNTING[0], n=3, stream=True,
                                    max_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    pieces, reasons, usage_chunks, _ = collect(stream)
    assert sorted(pieces) == [0, 1, 2]
    assert len(set(pieces.values())) == 1, "greedy choices are all the greedy text"
    assert all(r == ["length"] for r in reasons.values()), reasons
    assert usage_chunks == []


# --- prompt lists ----------------------------------------------------------------------------

PROMPTS = COUNTING


def test_a_list_of_string_prompts_gives_choices_in_prompt_order(sdk):
    alone = [sdk.completions.create(model=MODEL_NAME, prompt=p, max_tokens=6, temperature=0)
             for p in PROMPTS]
    listed = sdk.completions.create(model=MODEL_NAME, prompt=PROMPTS, n=2, max_tokens=6,
                                    temperature=0)
    assert [c.index for c in listed.choices] == [0, 1, 2, 3]
    want = [alone[0].choices[0].text] * 2 + [alone[1].choices[0].text] * 2
    assert texts(listed) == want, "choice index = prompt index * n + i"
    assert listed.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert listed.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)


def test_token_id_prompts_one_list_or_several(client, sdk):
    ids = [client.post("/tokenize", json={"content": p, "add_special": True}).json()["tokens"]
           for p in PROMPTS]
    by_text = texts(sdk.completions.create(model=MODEL_NAME, prompt=PROMPTS, max_tokens=6,
                                           temperature=0))
    lists = sdk.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0)
    assert texts(lists) == by_text
    one = sdk.completions.create(model=MODEL_NAME, prompt=ids[1], max_tokens=6, temperature=0)
    assert texts(one) == by_text[1:], "a flat list of ids is one prompt"


def test_echo_with_a_prompt_list_puts_each_prompt_first(sdk):
    r = sdk.completions.create(model=MODEL_NAME, prompt=PROMPTS, echo=True, max_tokens=3,
                               temperature=0)
    assert [c.text.startswith(p) for c, p in zip(r.choices, PROMPTS)] == [True, True]


# --- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize("path,base", [
    ("/v1/completions", {"prompt": "Hello"}),
    ("/v1/chat/completions", {"messages": CHAT}),
])
@pytest.mark.parametrize("n", [0, -1, 17, "2", 1.5])
def test_a_bad_n_is_a_400_naming_n(client, path, base, n):
    err = assert_openai_error(client.post(path, json={**base, "max_tokens": 2, "n": n}), 400)
    assert err["param"] == "n", err


def test_too_many_choices_in_all_is_a_400(client):
    err = assert_openai_error(client.post("/v1/completions", json={
        "prompt": ["a", "b", "c", "d", "e"], "n": 16, "max_tokens": 1}), 400)
    assert err["param"] == "n" and "64" in err["message"], err


def test_best_of_is_refused_by_name(client):
    err = assert_openai_error(client.post("/v1/completions", json={
        "prompt": "Hello", "max_tokens": 2, "n": 2, "best_of": 3}), 400)
    assert err["param"] == "best_of", err


@pytest.mark.parametrize("prompt", [[], ["a", [1, 2]], [[1, 2], "a"], ["a", 3], [[1], []],
                                    [[1], [2.5]], ["a", ""], {"text": "a"}])
def test_a_bad_prompt_list_is_a_400_naming_prompt(client, prompt):
    err = assert_openai_error(client.post("/v1/completions", json={
        "prompt": prompt, "max_tokens": 2}), 400)
    assert err["param"] == "prompt", err
