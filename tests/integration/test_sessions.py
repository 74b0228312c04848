"""Chat sessions (issue 25): brisk bench --sessions sends chat-UI traffic, every turn resending the
history with the server's own answers after a think time; --replay-sessions replays a recorded
trace's conversations the same way. requests.csv carries each request's HTTP phases."""

from __future__ import annotations

import json
from collections import defaultdict

import httpx
import pytest

from conftest import read_requests_csv, run_bench_args, scripted_stream_server

# Servers of their own and the session ones; only lower bounds on time: runs beside another test.
pytestmark = pytest.mark.parallel


def by_session(rows: list[dict]) -> dict[int, list[dict]]:
    sessions = defaultdict(list)
    for row in rows:
        sessions[int(row["session"])].append(row)
    return {s: sorted(turns, key=lambda row: int(row["turn"])) for s, turns in sessions.items()}


def test_every_turn_resends_the_history_with_the_servers_own_answers(tmp_path):
    """The scripted server streams a different text for every request and logs each history."""
    with scripted_stream_server(["--ttft-ms", "1", "--itl-ms", "1"]) as url:
        out = tmp_path / "out"
        proc = run_bench_args("--url", url, "--endpoint", "chat", "--sessions", "3", "--turns", "3",
                         "--think-time", "0.05", "--input-tokens", "24", "--output-tokens", "4",
                         "--warmup-requests", "1", "--out", out)
        streams = httpx.get(url + "/script-log", timeout=10).json()["streams"]
    assert "3 conversations" in proc.stderr
    measured = [s for s in streams if s["request"]["user"] != "brisk-bench-warmup"]
    assert len(measured) == 9 and len(streams) == 10
    conversations = defaultdict(list)
    for stream in measured:  # the log is in the order the streams finished
        conversations[stream["request"]["user"]].append(stream)
    assert len(conversations) == 3
    for turns in conversations.values():
        assert [len(t["messages"]) for t in turns] == [1, 3, 5]
        for before, after in zip(turns, turns[1:]):
            # The history exactly as sent before, then the answer that server streamed back.
            assert after["messages"][:-2] == before["messages"]
            assert after["messages"][-2] == {"role": "assistant", "content": before["answer"]}
            assert after["messages"][-1]["role"] == "user"
            assert after["request"]["max_tokens"] == 4
    first_lines = {turns[0]["messages"][0]["content"].split(".")[0] for turns in
                   conversations.values()}
    assert len(first_lines) == 3  # no two conversations share their first message

    result = json.loads((out / "result.json").read_text())
    assert result["workload"]["source"] == "sessions"
    assert result["workload"]["turns"] == 3
    assert result["workload"]["sessions"] == [3]
    assert result["workload"]["think_time_s"] == "0.05"
    assert result["runs"][0]["load"] == {"sessions": 3}
    assert result["runs"][0]["requests"]["ok"] == 9
    rows = read_requests_csv(out)
    sessions = by_session(rows)
    assert sorted(sessions) == [0, 1, 2]
    for turns in sessions.values():
        assert [int(r["turn"]) for r in turns] == [0, 1, 2]
        assert turns[0]["new_connection"] == "1" and float(turns[0]["connect_ms"]) >= 0
        for before, after in zip(turns, turns[1:]):
            # Sent after the answer was read for the think time: 50 ms, less 1 ms of rounding.
            assert float(after["sent_ms"]) >= float(before["end_ms"]) + 49
            assert after["new_connection"] == "0" and after["connect_ms"] == ""
    for row in rows:
        for phase in ("send_ms", "wait_ms", "receive_ms"):
            assert float(row[phase]) >= 0, (phase, row)
        # The phases add up to the request's time on its connection.
        total = float(row["send_ms"]) + float(row["wait_ms"]) + float(row["receive_ms"])
        assert total == pytest.approx(float(row["end_ms"]) - float(row["sent_ms"]), abs=0.01)


def test_a_failed_turn_ends_its_conversation_and_is_counted(tmp_path):
    """Nothing listens: each conversation's first turn fails and its later turns are not sent."""
    out = tmp_path / "out"
    proc = run_bench_args("--url", "http://127.0.0.1:9", "--model", "m", "--endpoint", "chat",
                     "--sessions", "2", "--turns", "3", "--think-time", "0",
                     "--warmup-requests", "0", "--out", out, check=False)
    assert proc.returncode == 1
    assert "4 turns were not sent" in proc.stderr
    rows = read_requests_csv(out)
    assert len(rows) == 2 and all(r["error"] == "connect_refused" for r in rows)


@pytest.mark.parametrize("flags, says", [
    (["--turns", "3"], "--turns requires --sessions"),
    (["--sessions", "2", "--rate", "4"], "excludes"),
    (["--sessions", "2", "--think-time", "gamma:2"], "exponential:MEAN"),
    (["--replay-sessions"], "--replay-sessions requires --trace"),
])
def test_session_flags_that_cannot_work_are_refused(flags, says):
    proc = run_bench_args("--url", "http://127.0.0.1:9", *flags, check=False)
    assert proc.returncode != 0
    assert says in proc.stderr, proc.stderr


def test_sessions_against_brisk_reuse_the_history_and_replay_from_its_trace(traced,
                                                                             tmp_path):
    """A real model: each turn's prompt holds the last prompt and answer, the prefix cache serves
    the history, the trace keeps the conversations apart, and --replay-sessions sends them again
    turn after turn."""
    server, trace = traced
    out = tmp_path / "sessions"
    run_bench_args("--url", server.base_url, "--endpoint", "chat", "--sessions", "2", "--turns", "3",
              "--think-time", "0", "--input-tokens", "40", "--output-tokens", "8",
              "--warmup-requests", "1", "--out", out)
    rows = read_requests_csv(out)
    assert len(rows) == 6
    for turns in by_session(rows).values():
        for before, after in zip(turns, turns[1:]):
            assert int(after["prompt_tokens"]) > (int(before["prompt_tokens"]) +
                                                  int(before["completion_tokens"]))
    server_delta = json.loads((out / "result.json").read_text())["runs"][0]["server"]
    # The later turns' histories come from the cache (the first turns share nothing).
    assert server_delta["prefix_cache_hit_tokens"] > 0, server_delta

    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    recorded = [line for line in lines if (line.get("session") or "").startswith("brisk-bench-0-0-")]
    assert len(recorded) == 6
    assert len({line["session"] for line in recorded}) == 2
    session_trace = tmp_path / "sessions.jsonl"
    session_trace.write_text("".join(json.dumps(line) + "\n" for line in recorded))

    replay = tmp_path / "replay"
    proc = run_bench_args("--url", server.base_url, "--trace", session_trace, "--replay-sessions",
                     "--warmup-requests", "0", "--out", replay)
    assert "the trace's 2 conversations" in proc.stderr
    result = json.loads((replay / "result.json").read_text())
    assert result["workload"]["replay"] == "sessions"
    assert result["runs"][0]["load"] == {"sessions": 2, "arrivals": "trace"}
    assert result["runs"][0]["requests"]["ok"] == 6
    replayed = by_session(read_requests_csv(replay))
    assert sorted(len(turns) for turns in replayed.values()) == [3, 3]
    for turns in replayed.values():
        for before, after in zip(turns, turns[1:]):
            assert float(after["sent_ms"]) >= float(before["end_ms"])
            assert int(after["completion_tokens"]) == 8
            assert int(after["prompt_tokens"]) > int(before["prompt_tokens"])


@pytest.mark.parametrize("server_fixture", ["brisk", "llama_server"])
def test_requests_csv_carries_what_the_server_said_about_each_turn(tmp_path, request,
                                                                   server_fixture):
    """A later turn finds its history in the server's prefix cache: requests.csv says how many
    prompt tokens were reused and how long the server itself took (brisk: its queue and TTFT;
    llama-server: its prompt processing), beside what the client measured."""
    server = request.getfixturevalue(server_fixture)
    out = tmp_path / "out"
    run_bench_args("--url", server.base_url, "--endpoint", "chat", "--sessions", "2",
                   "--turns", "2", "--think-time", "0", "--system-tokens", "200",
                   "--input-tokens", "16", "--output-tokens", "8", "--warmup-requests", "0",
                   "--out", out)
    rows = read_requests_csv(out)
    assert len(rows) == 4
    for row in rows:
        client_ttft = float(row["first_token_ms"]) - float(row["sent_ms"])
        server_ttft = float(row["server_ttft_ms"])
        assert 0 < server_ttft <= client_ttft + 1, row
        if server_fixture == "brisk":
            assert 0 <= float(row["server_queue_ms"]) <= server_ttft, row
        else:
            assert row["server_queue_ms"] == ""  # llama-server does not report its queue
    for turns in by_session(rows).values():
        # The second turn resends the first turn's prompt and answer: all but the tail of
        # that history comes from the cache.
        assert int(turns[1]["cached_prompt_tokens"]) >= int(turns[0]["prompt_tokens"]) - 16, turns
