"""Several models in one brisk serve: two generative models (Gemma 3 270M, SmolLM2 135M) and an
embedding model (all-MiniLM-L6-v2) side by side, each request routed by the model it names,
through the official openai SDK (docs/models.md)."""

from __future__ import annotations

import concurrent.futures
import math
import shutil
import subprocess

import httpx
import pytest
from openai import OpenAI

from conftest import (
    BRISK_BIN, CTX_SIZE, MODEL_FILE, MODEL_NAME, SECOND_MODEL_FILE, SECOND_MODEL_NAME, THREADS,
    Server, _start_brisk, _stop_and_check_clean_exit, assert_openai_error, free_port,
    model_path, parse_metrics, require_file,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

EMBEDDING_NAME = "all-minilm-l6-v2"
EMBEDDING_FILE = "all-MiniLM-L6-v2-f16.gguf"
MODELS = [MODEL_NAME, SECOND_MODEL_NAME, EMBEDDING_NAME]
SERVE_FLAGS = ["--max-seqs", "4", "--ctx-size", str(CTX_SIZE), "--threads", str(THREADS)]
CHAT = [{"role": "user", "content": "Name three colors."}]
TOKENS = 16


def serve_argv(port: int, models: list[str], extra: list[str] = ()) -> list[str]:
    argv = [str(BRISK_BIN), "serve", "--host", "127.0.0.1", "--port", str(port), *SERVE_FLAGS]
    for model in models:
        argv += ["--model", model]
    return argv + list(extra)


@pytest.fixture(scope="module")
def several(tmp_path_factory):
    for file in (MODEL_FILE, SECOND_MODEL_FILE, EMBEDDING_FILE):
        require_file(model_path(file), "fetch the test models first (make test-models)")
    port = free_port()
    server = Server(name="brisk-several", argv=serve_argv(port, MODELS), port=port,
                    log_path=tmp_path_factory.mktemp("logs") / "brisk-several.log")
    server.start("/ready")
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="module")
def openai_client(several):
    return OpenAI(base_url=several.base_url + "/v1", api_key="unused", max_retries=0)


def greedy_chat(client: OpenAI, model: str) -> str:
    answer = client.chat.completions.create(model=model, messages=CHAT, temperature=0,
                                            max_tokens=TOKENS)
    assert answer.model == model
    return answer.choices[0].message.content


def test_models_lists_each_with_its_kind_and_state(openai_client):
    listed = {model.id: model for model in openai_client.models.list().data}
    assert list(listed) == MODELS
    assert listed[MODEL_NAME].kind == "generative"
    assert listed[EMBEDDING_NAME].kind == "embedding"
    assert all(model.state == "loaded" for model in listed.values())
    assert listed[EMBEDDING_NAME].max_model_len == 512


@pytest.mark.parametrize("model, model_file", [(MODEL_NAME, MODEL_FILE),
                                               (SECOND_MODEL_NAME, SECOND_MODEL_FILE)])
def test_each_model_answers_as_it_does_served_alone(tmp_path_factory, openai_client, model,
                                                    model_file):
    alone = _start_brisk(tmp_path_factory, f"brisk-alone-{model}", ["--max-seqs", "4"],
                         api_key=None, model=(model, model_file))
    try:
        expected = greedy_chat(OpenAI(base_url=alone.base_url + "/v1", api_key="unused",
                                      max_retries=0), model)
    finally:
        _stop_and_check_clean_exit(alone)
    assert greedy_chat(openai_client, model) == expected


def test_two_models_generate_at_the_same_time(openai_client):
    # One request per model at a time, so each batch is the same as when it runs alone: the
    # other model's steps, interleaved with its own, must change nothing.
    alone = [greedy_chat(openai_client, model) for model in (MODEL_NAME, SECOND_MODEL_NAME)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for _ in range(2):
            together = list(pool.map(lambda model: greedy_chat(openai_client, model),
                                     [MODEL_NAME, SECOND_MODEL_NAME]))
            assert together == alone
    assert alone[0] != alone[1]  # two models, two answers


def test_the_embedding_model_beside_the_chat_models(openai_client):
    result = openai_client.embeddings.create(model=EMBEDDING_NAME,
                                             input=["a cat", "a dog"], encoding_format="float")
    assert result.model == EMBEDDING_NAME
    assert [len(item.embedding) for item in result.data] == [384, 384]
    assert math.isclose(sum(x * x for x in result.data[0].embedding), 1.0, rel_tol=1e-4)


def test_a_request_that_names_no_model_goes_to_the_first_of_its_kind(several):
    with several.client() as client:
        answer = client.post("/v1/chat/completions",
                             json={"messages": CHAT, "max_tokens": 2}).json()
        embedded = client.post("/v1/embeddings", json={"input": "x"}).json()
    assert answer["model"] == MODEL_NAME
    assert embedded["model"] == EMBEDDING_NAME


def test_an_unknown_model_is_a_404_that_lists_the_served_ones(several):
    with several.client() as client:
        response = client.post("/v1/chat/completions",
                               json={"model": "gpt-4o", "messages": CHAT, "max_tokens": 2})
    error = assert_openai_error(response, 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    for name in ["gpt-4o", *MODELS]:
        assert f"'{name}'" in error["message"]


@pytest.mark.parametrize("path, model, says", [
    ("/v1/embeddings", MODEL_NAME, "generative model"),
    ("/v1/chat/completions", EMBEDDING_NAME, "embedding model"),
    ("/v1/completions", EMBEDDING_NAME, "embedding model"),
])
def test_a_route_of_the_other_kind_is_a_400_that_says_why(several, path, model, says):
    body = {"model": model, "input": "x", "messages": CHAT, "prompt": "x"}
    with several.client() as client:
        error = assert_openai_error(client.post(path, json=body), 400)
    assert error["param"] == "model" and says in error["message"]


def test_tokenize_takes_the_model(several):
    with several.client() as client:
        tokens = {model: client.post("/tokenize", json={"content": "Hello world",
                                                         "model": model}).json()["tokens"]
                  for model in MODELS}
        assert client.post("/tokenize", json={"content": "Hello world"}).json()["tokens"] == \
            tokens[MODEL_NAME]
        assert_openai_error(client.post("/tokenize", json={"content": "x", "model": "nope"}),
                            404)
        error = assert_openai_error(client.post("/tokenize", json={"content": "x", "modle": "a"}),
                                    400)
        assert error["param"] == "modle"
        # llama-server's fields, where they ask for what brisk does.
        assert client.post("/tokenize", json={"content": "x", "parse_special": True,
                                              "with_pieces": False}).status_code == 200
        for field, value in (("parse_special", False), ("with_pieces", True)):
            error = assert_openai_error(client.post("/tokenize",
                                                    json={"content": "x", field: value}), 400)
            assert error["param"] == field
    assert len({tuple(t) for t in tokens.values()}) == 3  # three tokenizers


def test_debug_scheduler_takes_the_model(several):
    with several.client() as client:
        assert client.get(f"/debug/scheduler?model={SECOND_MODEL_NAME}").status_code == 200
        assert client.get("/debug/scheduler").status_code == 200
        assert_openai_error(client.get(f"/debug/scheduler?model={EMBEDDING_NAME}"), 400)


def test_metrics_carry_the_model_label_and_promtool_accepts_them(several, openai_client):
    greedy_chat(openai_client, SECOND_MODEL_NAME)
    openai_client.embeddings.create(model=EMBEDDING_NAME, input="x")
    with several.client() as client:
        client.post("/v1/chat/completions", json={"model": "nope", "messages": CHAT})
        text = client.get("/metrics").text
    metrics = parse_metrics(text)
    finished = sum(value for key, value in metrics.items()
                   if key.startswith("brisk_requests_finished_total{")
                   and f'model="{SECOND_MODEL_NAME}"' in key)
    assert finished >= 1
    assert f'brisk_requests_running{{model="{MODEL_NAME}"}}' in metrics
    assert metrics[f'brisk_embedding_inputs_total{{model="{EMBEDDING_NAME}"}}'] >= 1
    assert metrics['brisk_requests_rejected_total{reason="unknown_model"}'] >= 1
    # The device arbiter: each model's steps held the device for some time.
    assert metrics[f'brisk_device_busy_seconds_total{{model="{SECOND_MODEL_NAME}"}}'] > 0
    assert metrics[f'brisk_device_busy_seconds_total{{model="{EMBEDDING_NAME}"}}'] > 0
    assert metrics[f'brisk_arbiter_wait_seconds_count{{model="{SECOND_MODEL_NAME}"}}'] >= 1
    # One HELP and TYPE per family, whatever the number of models.
    assert text.count("# TYPE brisk_requests_running gauge") == 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's prometheus package (make deps)")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_ready_lists_each_model(several):
    with several.client() as client:
        body = client.get("/ready").json()
    assert body == {"status": "ready", "models": {name: "ready" for name in MODELS}}


def run_serve(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(BRISK_BIN), "serve", "--port", "0", *args], capture_output=True,
                          text=True, timeout=120)


def test_one_served_name_per_model():
    result = run_serve(["--model", MODEL_NAME, "--model", SECOND_MODEL_NAME,
                        "--served-model-name", "only-one"])
    assert result.returncode == 2
    assert "--served-model-name is given 1 times for 2 --model" in result.stderr


def test_two_models_of_one_name_are_refused():
    result = run_serve(["--model", MODEL_NAME, "--model", MODEL_NAME])
    assert result.returncode == 2
    assert f"two models are served as '{MODEL_NAME}'" in result.stderr


def test_a_flag_of_a_kind_no_model_has_is_refused():
    result = run_serve(["--model", EMBEDDING_NAME, "--max-seqs", "2"])
    assert result.returncode == 2 and "--max-seqs sets the completion engine" in result.stderr
    result = run_serve(["--model", MODEL_NAME, "--batch-window-ms", "5"])
    assert result.returncode == 2 and "--batch-window-ms sets the batcher" in result.stderr


def test_served_names_rename_each_model(tmp_path_factory):
    port = free_port()
    server = Server(name="brisk-renamed",
                    argv=serve_argv(port, [MODEL_NAME, EMBEDDING_NAME],
                                    ["--served-model-name", "chat",
                                     "--served-model-name", "embed"]),
                    port=port, log_path=tmp_path_factory.mktemp("logs") / "brisk-renamed.log")
    server.start("/ready")
    try:
        with server.client() as client:
            ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
            embedded = client.post("/v1/embeddings", json={"model": "embed", "input": "x"})
        assert ids == ["chat", "embed"]
        assert embedded.status_code == 200 and embedded.json()["model"] == "embed"
    finally:
        _stop_and_check_clean_exit(server)


MODELS_FILE = f"""
[[model]]
model = "{MODEL_NAME}"
name = "chat"
aliases = ["gpt-4o-mini"]
critical = true
kv-unified = false
max-seqs = 2

[[model]]
model = "{SECOND_MODEL_NAME}"
weight = 2
max-seqs = 3

[[model]]
model = "{EMBEDDING_NAME}"
name = "embed"
max-batch-inputs = 8
"""


def test_a_models_file_gives_each_model_its_names_share_and_flags(tmp_path_factory):
    models = tmp_path_factory.mktemp("models") / "models.toml"
    models.write_text(MODELS_FILE)
    port = free_port()
    server = Server(name="brisk-models-file",
                    argv=[str(BRISK_BIN), "serve", "--host", "127.0.0.1", "--port", str(port),
                          "--models", str(models), "--ctx-size", str(CTX_SIZE),
                          "--threads", str(THREADS)],
                    port=port, log_path=tmp_path_factory.mktemp("logs") / "brisk-file.log")
    server.start("/ready")
    try:
        with server.client() as client:
            listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
            by_alias = client.post("/v1/chat/completions",
                                   json={"model": "gpt-4o-mini", "messages": CHAT,
                                         "max_tokens": 2}).json()
            client.post("/v1/completions", json={"model": SECOND_MODEL_NAME, "prompt": "Hi",
                                                 "max_tokens": 2})  # its first step reports
            smol = client.get(f"/debug/scheduler?model={SECOND_MODEL_NAME}").json()
        assert list(listed) == ["chat", SECOND_MODEL_NAME, "embed"]
        assert listed["chat"]["aliases"] == ["gpt-4o-mini"]
        # --ctx-size from the command line, split between its own 2 sequences by kv-unified =
        # false; the second model keeps one buffer for all.
        assert listed["chat"]["max_model_len"] == CTX_SIZE // 2
        assert listed[SECOND_MODEL_NAME]["max_model_len"] > CTX_SIZE // 2
        assert by_alias["model"] == "chat"
        assert smol["limits"]["max_seqs"] == 3, smol
        log = server.log_tail(20000)
        assert f"chat critical, {SECOND_MODEL_NAME} weight 2, embed weight 1" in log
        assert "batches of up to 8 inputs" in log
    finally:
        _stop_and_check_clean_exit(server)


@pytest.mark.parametrize("text, says", [
    (f'[[model]]\nmodel = "{MODEL_NAME}"\nport = 1\n', "not expected: --port=1"),
    (f'[[model]]\nmodel = "{EMBEDDING_NAME}"\nmax-seqs = 2\n',
     "'max-seqs' sets the completion engine"),
    (f'[[model]]\nmodel = "{MODEL_NAME}"\nmax-seqs = 999\n', "--max-seqs: Value 999 not in range"),
    ('[[model]]\nname = "x"\n', "says no 'model'"),
    (f'[[model]]\nmodel = "{MODEL_NAME}"\n[[model]]\nmodel = "{SECOND_MODEL_NAME}"\n'
     f'aliases = ["{MODEL_NAME}"]\n', f"two models are served as '{MODEL_NAME}'"),
])
def test_a_models_file_that_cannot_be_served_is_refused_before_loading(tmp_path, text, says):
    models = tmp_path / "models.toml"
    models.write_text(text)
    result = run_serve(["--models", str(models)])
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert "loading" not in result.stderr


def test_a_models_file_replaces_model_flags(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[[model]]\nmodel = "{MODEL_NAME}"\n')
    result = run_serve(["--models", str(models), "--model", SECOND_MODEL_NAME])
    assert result.returncode == 2 and "leave out --model" in result.stderr
