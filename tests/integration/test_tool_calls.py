"""Tool calls through the official openai SDK, on two tool-call families: Qwen 2.5's template
(Hermes style, each call in <tool_call> tags) on SmolLM2 and Llama 3.2's (a bare JSON call) on
Gemma 3, given with --chat-template-file from the pinned llama.cpp's models/templates. Neither
model was trained on tools, so a required or named call is what the grammar makes of them: every
answer must be a call whose arguments follow the function's schema, whole and streamed alike;
under `auto` a call the model opens follows the schema too (a lazy grammar). A
history with calls and tool results renders; a template that cannot render tools refuses them;
every malformed tools field is a 400 that names it."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import (MODEL_FILE, MODEL_NAME, REPO_ROOT, SECOND_MODEL_FILE, SECOND_MODEL_NAME,
                      _start_brisk, _stop_and_check_clean_exit, assert_openai_error, require_file)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20},
                   "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "maxLength": 20}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a timezone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
SAMPLES = int(os.environ.get("BRISK_TOOL_SAMPLES", "12"))
TEMPLATES = REPO_ROOT / ".deps" / "llama.cpp" / "models" / "templates"
# family: (model, the template that renders tools for it)
FAMILIES = {
    "hermes-on-smollm2": ((SECOND_MODEL_NAME, SECOND_MODEL_FILE), "Qwen-Qwen2.5-7B-Instruct.jinja"),
    "llama3-on-gemma3": ((MODEL_NAME, MODEL_FILE), "meta-llama-Llama-3.2-3B-Instruct.jinja"),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request, tmp_path_factory):
    model, template = FAMILIES[request.param]
    require_file(TEMPLATES / template, "make llama-source")
    # No refusal by estimated wait: these tests check tool calls, and on a loaded CI machine 12
    # grammar-constrained answers at once were estimated past the 30 s limit (a 429 on 2026-12-07).
    server = _start_brisk(tmp_path_factory, f"brisk-tools-{request.param}",
                          ["--max-seqs", "8", "--max-queue-delay-ms", "0",
                           "--chat-template-file", str(TEMPLATES / template)],
                          api_key=None, model=model)
    sdk = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                        timeout=120)
    yield model[0], sdk, server
    _stop_and_check_clean_exit(server)


def _check_call(call) -> dict:
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) > 10, call
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def test_a_named_function_is_called_with_valid_arguments_whole_and_streamed(served):
    model, sdk, _ = served
    choice = {"type": "function", "function": {"name": "get_weather"}}
    whole = sdk.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                        tool_choice=choice, temperature=0, max_tokens=80,
                                        parallel_tool_calls=False)
    answer = whole.choices[0]
    assert answer.finish_reason == "tool_calls", answer
    assert answer.message.content is None, answer
    assert [c.function.name for c in answer.message.tool_calls] == ["get_weather"]
    _check_call(answer.message.tool_calls[0])

    # Streamed: the id and name once, in the call's first piece; the arguments in pieces that
    # add up to the whole answer's (greedy, so the same text).
    pieces, finish, ids, names = [], None, [], []
    for chunk in sdk.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                             tool_choice=choice, temperature=0, max_tokens=80,
                                             parallel_tool_calls=False, stream=True):
        delta = chunk.choices[0].delta
        assert not delta.content, chunk
        for call in delta.tool_calls or []:
            assert call.index == 0
            if call.id:
                ids.append(call.id)
                names.append(call.function.name)
            pieces.append(call.function.arguments or "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert names == ["get_weather"] and len(ids) == 1 and ids[0].startswith("call_")
    assert "".join(pieces) == answer.message.tool_calls[0].function.arguments


def test_required_calls_one_of_the_tools_validly_at_temperature_one(served):
    model, sdk, _ = served

    def one(seed: int):
        return sdk.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", temperature=1.0, seed=seed,
                                           max_tokens=120, parallel_tool_calls=False).choices[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(one, range(SAMPLES)))
    for answer in answers:
        assert answer.finish_reason == "tool_calls", answer
        assert len(answer.message.tool_calls) == 1, answer  # parallel_tool_calls false
        _check_call(answer.message.tool_calls[0])


def test_a_history_of_calls_and_results_renders_and_none_answers_in_content(served):
    model, sdk, _ = served
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather",
                          "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ]
    answer = sdk.chat.completions.create(model=model, messages=history, tools=TOOLS,
                                         tool_choice="none", temperature=0,
                                         max_tokens=16).choices[0]
    assert answer.finish_reason in ("stop", "length")
    assert answer.message.content and not answer.message.tool_calls, answer


def test_auto_answers_are_parsed_into_content_or_calls(served):
    model, sdk, _ = served
    answer = sdk.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                         temperature=0, max_tokens=60).choices[0]
    if answer.message.tool_calls:
        assert answer.finish_reason == "tool_calls"
        for call in answer.message.tool_calls:
            assert call.function.name in SCHEMAS
            json.loads(call.function.arguments)
    else:
        assert answer.message.content, answer


def test_auto_constrains_a_call_once_the_model_opens_one(served):
    """Under `auto` the grammar is lazy where the template marks calls (Hermes' <tool_call>): the
    model writes freely, and once it opens a call the call follows the schema. The "<" token is
    pushed up (logit_bias) so that SmolLM2, never trained on tools, opens calls, and litters
    everything with "<" — which a call's arguments may hold only inside a string. Llama 3.2's
    bare JSON calls have no marker: there `strict` under `auto` is refused, not promised."""
    model, sdk, server = served
    strict_tools = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    if model != SECOND_MODEL_NAME:
        with server.client() as client:
            body = {"messages": MESSAGES, "max_tokens": 4, "tools": strict_tools}
            err = assert_openai_error(client.post("/v1/chat/completions", json=body), 400)
        assert err["param"] == "tools" and "strict" in err["message"], err
        return
    less_than = single_token(server, "<")

    def ask(seed):
        return sdk.chat.completions.create(
            model=model, messages=MESSAGES, tools=strict_tools, parallel_tool_calls=False,
            temperature=1, seed=seed, max_tokens=160, logit_bias={str(less_than): 8}).choices[0]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(24)))
    calls = [a for a in answers if a.finish_reason == "tool_calls"]
    assert len(calls) >= 2, [(a.finish_reason, a.message.content) for a in answers]
    for answer in calls:
        assert len(answer.message.tool_calls) == 1, answer
        _check_call(answer.message.tool_calls[0])


def single_token(server, text: str) -> int:
    with server.client() as client:
        tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
    assert len(tokens) == 1, tokens
    return tokens[0]


BAD = [
    ({"tools": {"type": "function"}}, "tools", "list"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "letters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}, "tools",
     "schema"),
    ({"tools": [{"type": "function", "function": {"name": "f", "colour": "red"}}]}, "tools",
     "tools[0].function.colour"),
    ({"tools": TOOLS + [TOOLS[0]]}, "tools", "two tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "not in 'tools'"),
    ({"tool_choice": "required"}, "tool_choice", "empty"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "sometimes"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format", "forbid"),
    ({"tools": TOOLS, "tool_choice": "required", "ignore_eos": True}, "ignore_eos", "required"),
    ({"messages": [{"role": "tool", "content": "18"}]}, "messages", "tool_call_id"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages", "assistant"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]},
     "messages", "tool_calls[0]"),
]


@pytest.mark.parametrize("fields,param,words", BAD, ids=[b[2] for b in BAD])
def test_malformed_tool_fields_are_400s_that_name_them(served, fields, param, words):
    _, _, server = served
    with server.client() as client:
        body = {"messages": MESSAGES, "max_tokens": 4, **fields}
        err = assert_openai_error(client.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == param and words in err["message"], err


def test_a_template_that_cannot_render_tools_refuses_them(brisk):
    """The default Gemma 3 GGUF has no template (brisk renders it with the built-in 'gemma'):
    tools would never reach the model, so they are a 400, and a plain chat still works."""
    with brisk.client() as client:
        err = assert_openai_error(client.post("/v1/chat/completions", json={
            "messages": MESSAGES, "tools": TOOLS, "max_tokens": 4}), 400)
        assert err["param"] == "tools" and "Jinja" in err["message"], err
        ok = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
        assert ok.status_code == 200, ok.text
