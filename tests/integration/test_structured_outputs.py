"""Output formats through the official openai SDK: response_format json_object and json_schema,
llama.cpp's `grammar`; every answer that ends with `stop` parses and follows its schema, at
temperature 1 over many samples; bad schemas are 400s that name the field. And the request-field
rule of docs/api.md: every field is honoured, ignored on purpose, or refused by name."""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from conftest import MODEL_NAME, REPO_ROOT, assert_openai_error, get_metrics

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

# Four typed fields, every one required and nothing else: the grammar ends the object, so an
# answer is at most a few dozen tokens and always ends with `stop` well inside max_tokens.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "color": {"enum": ["red", "green", "blue"]},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "color", "member"],
    "additionalProperties": False,
}
# 40 in CI; `make structured-outputs-check` draws 200 (BENCHMARKS.md, "Structured outputs").
SAMPLES = int(os.environ.get("BRISK_GRAMMAR_SAMPLES", "40"))
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def sdk(brisk):
    return openai.OpenAI(base_url=brisk.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client() as c:
        yield c


def _person_format(strict: bool = True) -> dict:
    return {"type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": strict}}


def test_json_schema_answers_parse_and_validate_at_temperature_one(sdk):
    """Samples from the full distribution: every one ends with stop, parses, validates, and
    lists the properties in the schema's order."""
    def one(i: int):
        r = sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, temperature=1.0,
                                        seed=i, max_tokens=120, response_format=_person_format())
        return r.choices[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        choices = list(pool.map(one, range(SAMPLES)))
    for choice in choices:
        assert choice.finish_reason == "stop", choice
        value = json.loads(choice.message.content)
        jsonschema.validate(value, PERSON)
        assert list(value) == list(PERSON["properties"]), choice.message.content
    # Temperature 1 over many seeds: not one answer repeated.
    assert len({c.message.content for c in choices}) > SAMPLES // 4


def test_json_object_streamed_and_whole(sdk):
    """Greedy: the same text streamed and whole; a small model writes long objects, so the
    answer is cut by max_tokens, still a prefix of a JSON object."""
    whole = sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=30,
                                        temperature=0, response_format={"type": "json_object"})
    text, finish = "", None
    for chunk in sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=30,
                                             temperature=0, stream=True,
                                             response_format={"type": "json_object"}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert text.lstrip().startswith("{"), text


def test_json_object_answers_that_end_are_objects(sdk):
    def one(seed: int):
        return sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=150,
                                           seed=seed, response_format={"type": "json_object"}
                                           ).choices[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        choices = list(pool.map(one, range(16)))
    ended = [c for c in choices if c.finish_reason == "stop"]
    assert ended, [c.message.content for c in choices]
    for choice in ended:
        assert isinstance(json.loads(choice.message.content), dict), choice.message.content


def test_completions_endpoint_takes_a_schema_and_a_grammar(sdk):
    r = sdk.completions.create(model=MODEL_NAME, prompt="Is the sky blue? Answer:", max_tokens=8,
                               extra_body={"grammar": 'root ::= " yes" | " no"'})
    assert r.choices[0].text in (" yes", " no"), r
    assert r.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = sdk.completions.create(model=MODEL_NAME, prompt="A number as JSON:", max_tokens=40,
                               extra_body={"response_format": {
                                   "type": "json_schema",
                                   "json_schema": {"name": "n", "schema": schema}}})
    jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_a_schema_sent_again_is_compiled_once(brisk, sdk):
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "k", "schema": schema}}
    before = get_metrics(brisk)
    for _ in range(3):
        r = sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=20,
                                        response_format=fmt)
        assert json.loads(r.choices[0].message.content)["k"] in ("a", "b")
    after = get_metrics(brisk)
    compiled = "brisk_grammar_compilations_total"
    cached = "brisk_grammar_cache_hits_total"
    assert after[compiled] - before.get(compiled, 0) == 1
    assert after[cached] - before.get(cached, 0) == 2


@pytest.mark.parametrize("body, param, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object",
                                "properties": {"a": {"$ref": "#/definitions/missing"}}}}}},
     "response_format", "cannot resolve \\$ref"),
    ({"response_format": {"type": "xml"}}, "response_format", "json_object"),
    ({"grammar": "root ::= ("}, "grammar", "GBNF"),
    ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "grammar",
     "not both"),
    ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "ignore_eos"),
])
def test_a_bad_output_format_is_a_400_naming_its_field(client, body, param, words):
    r = client.post("/v1/chat/completions",
                    json={"messages": MESSAGES, "max_tokens": 5, **body})
    err = assert_openai_error(r, 400)
    assert err["param"] == param, err
    assert re.search(words, err["message"]), err
    assert client.get("/health").status_code == 200


# --- the request-field rule (docs/api.md) ----------------------------------------------------

def _documented_fields() -> list[tuple[str, bool, bool, str]]:
    rows = re.findall(r"^\| `([a-z_]+)` \| (yes|—) \| (yes|—) \| (honoured|ignored|refused) \|",
                      (REPO_ROOT / "docs" / "api.md").read_text(), re.M)
    assert len(rows) > 30, "docs/api.md lost its field table"
    return [(name, chat == "yes", comp == "yes", use) for name, chat, comp, use in rows]


# A value that asks for something, for each refused field.
ASKING = {"best_of": 2, "suffix": "end",
          "functions": [{"name": "f", "parameters": {}}],
          "function_call": {"name": "f"}, "modalities": ["text", "audio"],
          "audio": {"voice": "alloy", "format": "wav"},
          "prediction": {"type": "content", "content": "x"}, "reasoning_effort": "low",
          "web_search_options": {}}
IGNORED = {"user": "user-1", "store": False, "metadata": {"k": "v"}, "service_tier": "auto"}


def test_every_refused_and_ignored_field_of_docs_api_md(client):
    for name, chat, completions, use in _documented_fields():
        if use == "honoured":
            continue
        for path, here in (("/v1/chat/completions", chat), ("/v1/completions", completions)):
            base = ({"messages": MESSAGES} if path.endswith("chat/completions")
                    else {"prompt": "Hello"})
            value = ASKING[name] if use == "refused" else IGNORED[name]
            r = client.post(path, json={**base, "max_tokens": 2, name: value})
            if not here:
                err = assert_openai_error(r, 400)
                assert err["param"] == name, (path, err)
            elif use == "refused":
                err = assert_openai_error(r, 400)
                assert err["param"] == name and "not supported" in err["message"], (path, err)
            else:
                assert r.status_code == 200, (path, name, r.text)


def test_logit_bias_bans_and_forces_tokens(sdk, client):
    base = {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 4,
            "temperature": 0, "logprobs": 1}
    free = client.post("/v1/completions", json=base).json()["choices"][0]
    first = int(client.post("/tokenize", json={"content": free["logprobs"]["tokens"][0],
                                                "add_special": False}).json()["tokens"][0])
    banned = client.post("/v1/completions",
                         json={**base, "logit_bias": {str(first): -100}}).json()["choices"][0]
    assert banned["logprobs"]["tokens"][0] != free["logprobs"]["tokens"][0], (free, banned)
    # logprobs stay the model's own: the banned token's alternative keeps its probability.
    forced = client.post("/v1/completions", json={**base, "max_tokens": 3,
                                                  "logit_bias": {"1234": 100}}).json()
    tokens = forced["choices"][0]["logprobs"]["tokens"]
    piece = client.post("/tokenize", json={"content": tokens[0], "add_special": False}).json()
    assert piece["tokens"] == [1234], (tokens, piece)
    err = assert_openai_error(client.post("/v1/completions", json={
        **base, "logit_bias": {"99999999": 5}}), 400)
    assert err["param"] == "logit_bias" and "vocabulary" in err["message"], err
    err = assert_openai_error(client.post("/v1/completions", json={
        **base, "logit_bias": {"5": 101}}), 400)
    assert err["param"] == "logit_bias", err


def test_an_unknown_field_is_refused_by_name(sdk):
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=2,
                                    extra_body={"mirostat_tau": 1.2})
    assert raised.value.body["param"] == "mirostat_tau"
    assert "unrecognized request field" in raised.value.body["message"]
