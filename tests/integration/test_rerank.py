"""/v1/rerank: brisk serve with a reranker GGUF, checked score for score against llama.cpp's own
llama-server --reranking on the same file, in the body shapes Jina's, Cohere's and llama-server's
clients send, and with the inputs a client gets wrong.

No cross-encoder is packaged on PyPI or in Debian, so the reranker is made here from
all-MiniLM-L6-v2's encoder and a generated classification head (scripts/make_test_reranker.py):
its scores rank nothing meaningfully, but every part of serving them is real."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import httpx
import pytest

from conftest import (
    BRISK_BIN,
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

# Scores and shapes only, no timing: it may run beside another file (`make test`).
pytestmark = pytest.mark.parallel

ENCODER_FILE = "all-MiniLM-L6-v2-f16.gguf"
MAX_TOKENS = 512  # all-MiniLM's trained context

QUERY = "How do giant pandas live in the wild?"
DOCUMENTS = [
    "The giant panda is a bear native to south central China; it eats bamboo almost exclusively.",
    "Quarterly revenue grew by 12% despite supply-chain issues.",
    "Pandas spend 10 to 16 hours a day feeding, mostly on bamboo shoots and leaves.",
    "Crème brûlée, façade, naïve: accents are lowercased and stripped by BERT's normalizer.",
    "Rust's borrow checker prevents data races at compile time. " * 8,
    "hi",
]


@pytest.fixture(scope="module")
def reranker_file(test_reranker_file) -> Path:
    return test_reranker_file


def start_brisk(tmp_path_factory, model: Path | str, name: str, extra: list[str] = ()) -> Server:
    port = free_port()
    argv = [str(BRISK_BIN), "serve", "--model", str(model), "--port", str(port), "--host",
            "127.0.0.1", "--threads", str(THREADS), *extra]
    server = Server(name=name, argv=argv, port=port,
                    log_path=tmp_path_factory.mktemp("logs") / f"{name}.log")
    server.start("/ready")
    return server


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, reranker_file):
    server = start_brisk(tmp_path_factory, reranker_file, "brisk-rerank",
                         ["--batch-window-ms", "2", "--max-queued-inputs", "4096"])
    yield server
    _stop_and_check_clean_exit(server)


@pytest.fixture(scope="module")
def llama_reranker(tmp_path_factory, reranker_file):
    require_file(LLAMA_SERVER_BIN, "build the llama.cpp reference tools first (make)")
    port = free_port()
    argv = [str(LLAMA_SERVER_BIN), "-m", str(reranker_file), "--reranking", "--host", "127.0.0.1",
            "--port", str(port), "-t", str(THREADS), "-c", "4096", "-np", "8", "-b", "4096",
            "-ub", "4096"]
    server = Server(name="llama-server-rerank", argv=argv, port=port,
                    log_path=tmp_path_factory.mktemp("logs") / "llama-server-rerank.log")
    server.start("/health")
    yield server
    server.terminate()
    server.kill()


def rerank(server: Server, payload: dict, path: str = "/v1/rerank") -> httpx.Response:
    with server.client() as client:
        return client.post(path, json=payload)


def scores_by_index(response: httpx.Response) -> dict[int, float]:
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True), "results are not best first"
    return {r["index"]: r["relevance_score"] for r in results}


def test_scores_equal_llama_servers_on_the_same_file(reranker, llama_reranker):
    payload = {"query": QUERY, "documents": DOCUMENTS}
    ours = scores_by_index(rerank(reranker, payload))
    theirs = scores_by_index(rerank(llama_reranker, payload))
    assert sorted(ours) == list(range(len(DOCUMENTS)))
    # Batched, a score moves by up to ~0.007 between servers (ggml picks its matrix kernels by a
    # batch's token count, and the head magnifies the rounding): 0.02 on scores ~9 apart.
    for i in range(len(DOCUMENTS)):
        assert ours[i] == pytest.approx(theirs[i], abs=0.02), f"document {i}"
    # The same order, and scores that differ between documents (the head is not degenerate).
    assert sorted(ours, key=ours.get) == sorted(theirs, key=theirs.get)
    assert max(ours.values()) - min(ours.values()) > 0.5
    # One document alone is one sequence in either server: the same score to the bit.
    for document in DOCUMENTS[:3]:
        alone = {"query": QUERY, "documents": [document]}
        assert scores_by_index(rerank(reranker, alone)) == scores_by_index(rerank(llama_reranker, alone))
    # The query matters: the same documents score differently against another one.
    other = scores_by_index(rerank(reranker, {"query": "quarterly revenue", "documents": DOCUMENTS}))
    assert any(abs(other[i] - ours[i]) > 0.1 for i in ours)


def test_the_response_has_the_shape_jina_and_cohere_clients_read(reranker):
    response = rerank(reranker, {"query": QUERY, "documents": DOCUMENTS[:3], "top_n": 2,
                                 "return_documents": True, "model": "whatever-the-client-says"})
    assert response.status_code == 404  # a model name it does not serve
    response = rerank(reranker, {"query": QUERY, "documents": [DOCUMENTS[0], {"text": DOCUMENTS[1]},
                                                               DOCUMENTS[2]],
                                 "top_n": 2, "return_documents": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "test-reranker"
    assert len(body["results"]) == 2
    for result in body["results"]:
        assert set(result) == {"index", "relevance_score", "document"}
        assert result["document"]["text"] == DOCUMENTS[result["index"]]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 3 * 4
    everything = scores_by_index(rerank(reranker, {"query": QUERY, "documents": DOCUMENTS[:3]}))
    best_two = sorted(everything, key=everything.get, reverse=True)[:2]
    assert [r["index"] for r in body["results"]] == best_two
    # Cohere's v2 route and llama-server's short one answer the same.
    for path in ("/v2/rerank", "/rerank"):
        assert scores_by_index(rerank(reranker, {"query": QUERY, "documents": DOCUMENTS[:3]},
                                      path)) == everything


def test_a_document_gets_the_same_score_alone_and_batched(reranker):
    alone = scores_by_index(rerank(reranker, {"query": QUERY, "documents": [DOCUMENTS[2]]}))[0]
    assert scores_by_index(rerank(reranker, {"query": QUERY, "documents": [DOCUMENTS[2]]}))[0] == alone
    before = get_metrics(reranker)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        crowd = list(pool.map(
            lambda i: scores_by_index(rerank(reranker, {"query": QUERY,
                                                        "documents": [DOCUMENTS[i % 6], DOCUMENTS[2]]})),
            range(16)))
    after = get_metrics(reranker)
    for scores in crowd:
        assert scores[1] == pytest.approx(alone, abs=0.02)
    assert after["brisk_embedding_inputs_total"] - before["brisk_embedding_inputs_total"] == 32
    batches = sum(after.get(k, 0) - before.get(k, 0) for k in after
                  if k.startswith("brisk_embedding_batches_total"))
    assert batches < 16, f"{batches} batches for 16 concurrent requests: nothing was batched"


@pytest.mark.parametrize("payload, param", [
    ({"documents": ["a"]}, "query"),
    ({"query": "", "documents": ["a"]}, "query"),
    ({"query": 7, "documents": ["a"]}, "query"),
    ({"query": "q"}, "documents"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": ["a", 3]}, "documents"),
    ({"query": "q", "documents": ["d"] * 1001}, "documents"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, "return_documents"),
    ({"query": "q", "texts": ["a"]}, "texts"),
    ({"query": "q", "documents": ["a"], "temperature": 0.5}, "temperature"),
    ({"query": "q", "documents": ["word " * 600]}, "documents"),
    ({"query": "word " * 600, "documents": ["a"], "truncate": True}, "query"),
])
def test_bad_input_is_a_400_that_names_the_field(reranker, payload, param):
    error = assert_openai_error(rerank(reranker, payload), 400)
    assert error["param"] == param, error


def test_truncate_and_max_tokens_per_doc_cut_the_document_not_the_query(reranker):
    long_document = "bamboo " * 600
    response = rerank(reranker, {"query": QUERY, "documents": [long_document], "truncate": True})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == MAX_TOKENS
    short = rerank(reranker, {"query": QUERY, "documents": [long_document], "max_tokens_per_doc": 8})
    assert short.status_code == 200, short.text
    # [CLS] query [SEP] (as /tokenize counts the query), 8 document tokens and the closing [SEP].
    with reranker.client() as client:
        query_tokens = len(client.post("/tokenize", json={"content": QUERY}).json()["tokens"])
    assert short.json()["usage"]["prompt_tokens"] == query_tokens + 8 + 1
    # Cut to 8 tokens is the same pair as the document's first 8 tokens sent whole.
    same = rerank(reranker, {"query": QUERY, "documents": ["bamboo " * 8]})
    assert scores_by_index(short)[0] == pytest.approx(scores_by_index(same)[0], abs=1e-5)


def test_each_route_refuses_the_other_kind_of_model_by_name(tmp_path_factory, reranker):
    with reranker.client() as client:
        embeddings = client.post("/v1/embeddings", json={"input": "x"})
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        models = client.get("/v1/models").json()["data"]
    assert "/v1/rerank" in assert_openai_error(embeddings, 400)["message"]
    assert "reranker" in assert_openai_error(chat, 400)["message"]
    assert models[0]["kind"] == "reranker"
    require_file(model_path(ENCODER_FILE), "fetch all-minilm-l6-v2 first")
    embedder = start_brisk(tmp_path_factory, "all-minilm-l6-v2", "brisk-embeddings-for-rerank")
    try:
        error = assert_openai_error(rerank(embedder, {"query": "q", "documents": ["a"]}), 400)
        assert "scores no documents" in error["message"] and error["param"] == "model"
    finally:
        _stop_and_check_clean_exit(embedder)


@pytest.mark.parametrize("target", ["reranker", "llama_reranker"])
def test_bench_drives_the_rerank_endpoint_of_either_server(target, request, tmp_path):
    """brisk bench --endpoint rerank: every document's score comes back from either server, and
    result.json says what was sent."""
    server = request.getfixturevalue(target)
    run_bench_args("--url", server.base_url, "--endpoint", "rerank", "--model", "test-reranker",
                   "--inputs-per-request", 4, "--input-tokens", 32, "--concurrency", 4,
                   "--num-requests", 8, "--warmup-requests", 0, "--out", tmp_path)
    result = json.loads((tmp_path / "result.json").read_text())
    run = result["runs"][0]
    assert run["requests"] == {"ok": 8, "failed": 0, "timeouts": 0}
    assert result["workload"]["endpoint"] == "rerank"
    assert run["embedding_throughput"] == pytest.approx(4 * run["request_throughput"], rel=1e-6)
    # 4 documents of ~32 tokens and the 16-token query with each.
    tokens_per_document = run["input_token_throughput"] / run["embedding_throughput"]
    assert 40 <= tokens_per_document <= 56, tokens_per_document
