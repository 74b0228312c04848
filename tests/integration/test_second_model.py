"""The second real model, SmolLM2-135M-Instruct (`brisk pull smollm2-135m`), end to end.

Gemma 3 has sliding-window layers and no chat template in its GGUF, so brisk picks llama.cpp's
built-in one by architecture. SmolLM2 is the other case: a Llama with full attention everywhere and
its own Jinja chat template in the file. brisk must render that template as llama-server does
(`--jinja`), and generate the same greedy text, through the official `openai` SDK.
"""

from __future__ import annotations

import pytest
from openai import OpenAI

from conftest import (
    CTX_SIZE, LLAMA_SERVER_BIN, SECOND_MODEL_FILE, SECOND_MODEL_NAME, THREADS, Server,
    _start_brisk, _stop_and_check_clean_exit, free_port, model_path, require_file,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three colors."},
     {"role": "assistant", "content": "Red, green, blue."},
     {"role": "user", "content": "Two more?"}],
]
TOKENS = 24


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    server = _start_brisk(tmp_path_factory, "brisk-smollm2", ["--max-seqs", "4"], api_key=None,
                          model=(SECOND_MODEL_NAME, SECOND_MODEL_FILE))
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="module")
def smol_reference(tmp_path_factory):
    require_file(LLAMA_SERVER_BIN, "build the llama.cpp reference tools first (make)")
    port = free_port()
    argv = [str(LLAMA_SERVER_BIN), "-m", str(model_path(SECOND_MODEL_FILE)), "--host", "127.0.0.1",
            "--port", str(port), "-t", str(THREADS), "-c", str(CTX_SIZE), "-np", "1", "--jinja"]
    server = Server(name="llama-server-smollm2", argv=argv, port=port,
                    log_path=tmp_path_factory.mktemp("logs") / "llama-server-smollm2.log")
    server.start("/health")
    yield server
    server.terminate()
    server.kill()


def sdk(server: Server) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120)


def test_models_lists_the_second_model(smol):
    assert [m.id for m in sdk(smol).models.list().data] == [SECOND_MODEL_NAME]


@pytest.mark.parametrize("messages", CHATS, ids=["one-turn", "multi-turn-system"])
def test_chat_template_and_greedy_text_match_llama_server(smol, smol_reference, messages):
    ours = sdk(smol).chat.completions.create(model=SECOND_MODEL_NAME, messages=messages,
                                             max_tokens=TOKENS, temperature=0)
    ref = sdk(smol_reference).chat.completions.create(
        model="ref", messages=messages, max_tokens=TOKENS, temperature=0,
        extra_body={"cache_prompt": False})
    assert ours.usage.prompt_tokens == ref.usage.prompt_tokens, (
        f"the GGUF's chat template renders differently: brisk {ours.usage} vs llama-server "
        f"{ref.usage}")
    assert ours.choices[0].message.content == ref.choices[0].message.content
    assert ours.choices[0].finish_reason == ref.choices[0].finish_reason
    assert ours.usage.completion_tokens == ref.usage.completion_tokens


def test_the_templates_own_logic_runs(smol):
    """SmolLM2's template adds its default system prompt when the chat has none: the prompt
    brisk feeds the model is exactly that rendering (brisk once used llama.cpp's built-in ChatML,
    which has no such logic, and fed 21 tokens fewer than llama-server, vLLM or transformers)."""
    rendered = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
                "<|im_end|>\n<|im_start|>assistant\n")
    with smol.client() as http:
        tokens = http.post("/tokenize", json={"content": rendered, "add_special": True,
                                              "parse_special": True})
    assert tokens.status_code == 200, tokens.text
    answer = sdk(smol).chat.completions.create(model=SECOND_MODEL_NAME, messages=CHATS[0],
                                               max_tokens=1, temperature=0)
    assert answer.usage.prompt_tokens == len(tokens.json()["tokens"]), (answer.usage,
                                                                        tokens.json())


def test_streamed_chat_equals_the_whole_answer(smol):
    client = sdk(smol)
    whole = client.chat.completions.create(model=SECOND_MODEL_NAME, messages=CHATS[1],
                                           max_tokens=TOKENS, temperature=0)
    pieces = client.chat.completions.create(model=SECOND_MODEL_NAME, messages=CHATS[1],
                                            max_tokens=TOKENS, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    text, usage = [], None
    for chunk in pieces:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(text) == whole.choices[0].message.content
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
