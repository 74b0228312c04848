"""Which models are loaded: a memory budget that holds only some of them, load on demand,
unload after --keep-alive or by POST /models/unload, never while requests are in flight, and
pinned models (docs/models.md, "Memory budget")."""

from __future__ import annotations

import subprocess
import threading
import time

import httpx
import pytest
from openai import OpenAI

from conftest import (
    BRISK_BIN, CTX_SIZE, MODEL_FILE, MODEL_NAME, SECOND_MODEL_FILE, SECOND_MODEL_NAME, THREADS,
    Server, _stop_and_check_clean_exit, assert_openai_error, free_port, get_metrics, model_path,
    require_file, sse_lines,
)

pytestmark = pytest.mark.parallel

EMBEDDING_NAME = "all-minilm-l6-v2"
EMBEDDING_FILE = "all-MiniLM-L6-v2-f16.gguf"
GENERATIVE = [MODEL_NAME, SECOND_MODEL_NAME]
# No host tier: the budget then counts what the models hold from the start.
SERVE_FLAGS = ["--max-seqs", "4", "--ctx-size", str(CTX_SIZE), "--threads", str(THREADS),
               "--cache-ram", "0"]
CHAT = [{"role": "user", "content": "Name three colors."}]


def start(tmp_path_factory, name: str, models: list[str], extra: list[str] = (),
          api_key: str | None = None) -> Server:
    for file in (MODEL_FILE, SECOND_MODEL_FILE, EMBEDDING_FILE):
        require_file(model_path(file), "fetch the test models first (make test-models)")
    port = free_port()
    argv = [str(BRISK_BIN), "serve", "--host", "127.0.0.1", "--port", str(port), *SERVE_FLAGS]
    for model in models:
        argv += ["--model", model]
    argv += list(extra)
    if api_key:
        argv += ["--api-key", api_key]
    server = Server(name=name, argv=argv, port=port, api_key=api_key,
                    log_path=tmp_path_factory.mktemp("logs") / f"{name}.log")
    server.start("/health")
    return server


def listed(server: Server) -> dict[str, dict]:
    r = httpx.get(server.base_url + "/v1/models", headers=server.headers, timeout=10)
    assert r.status_code == 200, r.text
    return {model["id"]: model for model in r.json()["data"]}


def states(server: Server) -> dict[str, str]:
    return {name: model["state"] for name, model in listed(server).items()}


@pytest.fixture(scope="module")
def memory_of(tmp_path_factory) -> dict[str, int]:
    """What each model takes of the budget, as a server that holds them all says."""
    server = start(tmp_path_factory, "brisk-residency-sizes", GENERATIVE + [EMBEDDING_NAME])
    try:
        return {name: model["memory_bytes"] for name, model in listed(server).items()}
    finally:
        _stop_and_check_clean_exit(server)


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory, memory_of):
    """A budget that holds either generative model, never both."""
    budget = max(memory_of[name] for name in GENERATIVE) + 1024 * 1024
    assert budget < sum(memory_of[name] for name in GENERATIVE)
    server = start(tmp_path_factory, "brisk-one-at-a-time", GENERATIVE,
                   ["--memory-budget", str(budget)])
    yield server
    _stop_and_check_clean_exit(server)


def chat(server: Server, model: str, max_tokens: int = 12) -> dict:
    r = httpx.post(server.base_url + "/v1/chat/completions", headers=server.headers, timeout=120,
                   json={"model": model, "messages": CHAT, "temperature": 0,
                         "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_model_beyond_the_budget_waits_unloaded_and_loads_on_demand(one_at_a_time):
    server = one_at_a_time
    # Loaded in order while they fit: the first, not the second.
    assert states(server) == {MODEL_NAME: "loaded", SECOND_MODEL_NAME: "unloaded"}
    assert listed(server)[SECOND_MODEL_NAME]["max_model_len"] is None  # known once loaded
    before = get_metrics(server)
    answer = chat(server, SECOND_MODEL_NAME)
    assert answer["model"] == SECOND_MODEL_NAME
    assert answer["brisk_timings"]["model_load_ms"] > 0
    # Its memory came from the least recently used idle model.
    assert states(server) == {MODEL_NAME: "unloaded", SECOND_MODEL_NAME: "loaded"}
    after = get_metrics(server)
    loads = f'brisk_model_loads_total{{model="{SECOND_MODEL_NAME}",reason="request"}}'
    unloads = f'brisk_model_unloads_total{{model="{MODEL_NAME}",reason="memory"}}'
    assert after[loads] == before.get(loads, 0) + 1
    assert after[unloads] == before.get(unloads, 0) + 1
    assert after[f'brisk_model_load_seconds_count{{model="{SECOND_MODEL_NAME}"}}'] >= 1
    assert after["brisk_memory_loaded_bytes"] <= after["brisk_memory_budget_bytes"]
    # A request to a loaded model carries no load time.
    assert "model_load_ms" not in chat(server, SECOND_MODEL_NAME)["brisk_timings"]


def test_unload_and_reload_keep_the_greedy_answer(one_at_a_time):
    server = one_at_a_time
    first = chat(server, MODEL_NAME)["choices"][0]["message"]["content"]
    r = httpx.post(server.base_url + "/models/unload", json={"model": MODEL_NAME}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json() == {"model": MODEL_NAME, "state": "unloaded"}
    assert states(server)[MODEL_NAME] == "unloaded"
    again = chat(server, MODEL_NAME)
    assert again["brisk_timings"]["model_load_ms"] > 0
    assert again["choices"][0]["message"]["content"] == first
    # And through the openai SDK.
    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    sdk = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=0,
                                         max_tokens=12)
    assert sdk.choices[0].message.content == first


def test_load_api_loads_and_says_how_long(one_at_a_time):
    server = one_at_a_time
    httpx.post(server.base_url + "/models/unload", json={"model": SECOND_MODEL_NAME}, timeout=30)
    r = httpx.post(server.base_url + "/models/load", json={"model": SECOND_MODEL_NAME},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "loaded" and r.json()["load_ms"] >= 0
    assert states(server)[SECOND_MODEL_NAME] == "loaded"
    # Loading a loaded model is a no-op that answers the same.
    r = httpx.post(server.base_url + "/models/load", json={"model": SECOND_MODEL_NAME}, timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path, body, status, says", [
    ("/models/load", {"model": "no-such-model"}, 404, "this server serves"),
    ("/models/unload", {"model": "no-such-model"}, 404, "this server serves"),
    ("/models/load", {}, 400, '{"model": NAME}'),
    ("/models/load", {"model": 3}, 400, '{"model": NAME}'),
    ("/models/unload", {"model": MODEL_NAME, "force": True}, 400, "'force' is not a field"),
])
def test_load_and_unload_refuse_bad_input_by_name(one_at_a_time, path, body, status, says):
    r = httpx.post(one_at_a_time.base_url + path, json=body, timeout=30)
    assert says in assert_openai_error(r, status)["message"]


def test_a_model_with_requests_in_flight_is_never_unloaded(one_at_a_time):
    """Unload refuses it (409), and the other model's request waits for it to finish instead of
    cutting it off, then loads."""
    server = one_at_a_time
    httpx.post(server.base_url + "/models/load", json={"model": MODEL_NAME}, timeout=60)
    assert states(server)[MODEL_NAME] == "loaded"
    ended = {}

    def long_stream():
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", timeout=120,
                          json={"model": MODEL_NAME, "messages": CHAT, "stream": True,
                                "max_tokens": 160, "ignore_eos": True}) as r:
            assert r.status_code == 200
            for _ in sse_lines(r):
                ended.setdefault("first", time.monotonic())
        ended["at"] = time.monotonic()

    streaming = threading.Thread(target=long_stream)
    streaming.start()
    deadline = time.monotonic() + 30
    while "first" not in ended and time.monotonic() < deadline:
        time.sleep(0.01)
    r = httpx.post(server.base_url + "/models/unload", json={"model": MODEL_NAME}, timeout=30)
    error = assert_openai_error(r, 409)
    assert error["code"] == "model_busy" and "in flight" in error["message"]
    answer = chat(server, SECOND_MODEL_NAME)
    answered = time.monotonic()
    streaming.join()
    assert ended["at"] <= answered, "the busy model was unloaded under its stream"
    assert answer["brisk_timings"]["model_load_ms"] > 0


def test_keep_alive_unloads_an_idle_model(tmp_path_factory):
    server = start(tmp_path_factory, "brisk-keep-alive", [MODEL_NAME, EMBEDDING_NAME],
                   ["--keep-alive", "1s"])
    try:
        chat(server, MODEL_NAME, max_tokens=2)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and states(server)[MODEL_NAME] != "unloaded":
            time.sleep(0.2)
        assert states(server)[MODEL_NAME] == "unloaded"
        metrics = get_metrics(server)
        assert metrics[f'brisk_model_unloads_total{{model="{MODEL_NAME}",reason="keep_alive"}}'] >= 1
        # It comes back on the next request.
        assert chat(server, MODEL_NAME, max_tokens=2)["brisk_timings"]["model_load_ms"] > 0
    finally:
        _stop_and_check_clean_exit(server)


def test_a_pinned_model_stays_loaded(tmp_path_factory, memory_of):
    models_file = tmp_path_factory.mktemp("models") / "models.toml"
    models_file.write_text(
        f'[[model]]\nmodel = "{EMBEDDING_NAME}"\npinned = true\n\n'
        f'[[model]]\nmodel = "{MODEL_NAME}"\n\n[[model]]\nmodel = "{SECOND_MODEL_NAME}"\n')
    # Room for the pinned one and one generative model.
    budget = memory_of[EMBEDDING_NAME] + max(memory_of[name] for name in GENERATIVE) + (1 << 20)
    port = free_port()
    server = Server(name="brisk-pinned", port=port,
                    argv=[str(BRISK_BIN), "serve", "--host", "127.0.0.1", "--port", str(port),
                          *SERVE_FLAGS, "--models", str(models_file), "--memory-budget",
                          str(budget)],
                    log_path=tmp_path_factory.mktemp("logs") / "brisk-pinned.log")
    server.start("/health")
    try:
        assert listed(server)[EMBEDDING_NAME]["pinned"] is True
        chat(server, SECOND_MODEL_NAME, max_tokens=2)
        assert states(server) == {EMBEDDING_NAME: "loaded", MODEL_NAME: "unloaded",
                                  SECOND_MODEL_NAME: "loaded"}
        r = httpx.post(server.base_url + "/models/unload", json={"model": EMBEDDING_NAME},
                       timeout=30)
        assert "is pinned" in assert_openai_error(r, 400)["message"]
    finally:
        _stop_and_check_clean_exit(server)


def test_a_model_that_can_never_fit_is_refused_at_start_with_what_is_missing(memory_of):
    budget = memory_of[MODEL_NAME] // 2
    done = subprocess.run([str(BRISK_BIN), "serve", "--port", "0", *SERVE_FLAGS, "--model",
                           MODEL_NAME, "--memory-budget", str(budget)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"'{MODEL_NAME}' needs" in done.stderr and "is missing" in done.stderr, done.stderr


def test_a_budget_that_is_no_size_is_refused():
    done = subprocess.run([str(BRISK_BIN), "serve", "--port", "0", "--model", MODEL_NAME,
                           "--memory-budget", "lots"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "--memory-budget: 'lots' is no size" in done.stderr, done.stderr


def test_load_and_unload_are_behind_the_api_key(tmp_path_factory):
    server = start(tmp_path_factory, "brisk-residency-key", [MODEL_NAME], api_key="sekret")
    try:
        for path in ("/models/load", "/models/unload"):
            r = httpx.post(server.base_url + path, json={"model": MODEL_NAME}, timeout=30)
            assert_openai_error(r, 401)
        r = httpx.post(server.base_url + "/models/load", json={"model": MODEL_NAME},
                       headers=server.headers, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        _stop_and_check_clean_exit(server)


def test_device_names_a_gpu_and_without_one_is_refused():
    done = subprocess.run([str(BRISK_BIN), "serve", "--port", "0", *SERVE_FLAGS, "--model",
                           MODEL_NAME, "--device", "0"], capture_output=True, text=True,
                          timeout=120)
    if "there are" in done.stderr or done.returncode == 0:
        pytest.skip("a GPU is visible: pinning is checked by bench/gpu_check.sh")
    assert done.returncode == 1
    assert "--device 0: no GPU is visible" in done.stderr, done.stderr
