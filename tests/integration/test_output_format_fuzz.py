"""The schema -> grammar path fuzzed through a real server: random JSON schemas (nested, with
contradictory bounds, odd types, patterns, refs, extreme numbers) as response_format, and random
GBNF as `grammar`. Every one must be answered 200 or a 400 that names its field, quickly, and
the server must stay up. A schema with minItems above maxItems once made llama.cpp's grammar
parser allocate until the process was killed; an integer between 5 and 3 was a 500.

CI draws BRISK_FORMAT_FUZZ_CASES (120) of each; `make format-fuzz` draws 2000 (BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import random
import time

import httpx
import pytest

from conftest import assert_openai_error, sse_lines

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

CASES = int(os.environ.get("BRISK_FORMAT_FUZZ_CASES", "120"))
SEED = int(os.environ.get("BRISK_FORMAT_FUZZ_SEED", "20261206"))
# A schema is compiled on an I/O thread and answered in 2 tokens: far less than this.
PER_REQUEST_S = 20.0

NUMBERS = [0, 1, 2, 3, 5, -1, 10, 100, 2000, 2001, 10**6, 2**31, -2**63, 1.5, 1e308, -0.0]
KEYS = ["a", "b", "name", "x y", "é", "😀", "\"q\"", "back\\slash", ""]
PATTERNS = ["^a+$", "[0-9]{3}-[0-9]{2}", "(ab|cd)*", "^(a|b)*c{3}$", "\\d{2,1}", "([",
            "^.{0,5}$", "[^\"]+", "x{1000}", "(((a)))", "^\\w+@\\w+\\.com$", ""]
FORMATS = ["date", "date-time", "time", "uuid", "email", "uri", "nonsense"]
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array", "nothing"]


def _bound(rng: random.Random):
    return rng.choice(NUMBERS) if rng.random() < 0.3 else rng.randint(0, 8)


def _bounds(rng: random.Random, schema: dict, low: str, high: str) -> None:
    """Either bound, neither, or both (in either order: a minimum above the maximum is the case
    that once brought the server down)."""
    for key in (low, high):
        if rng.random() < 0.6:
            schema[key] = _bound(rng)


def _schema(rng: random.Random, depth: int = 0):
    if depth > 4 or rng.random() < 0.1:
        return rng.choice([{}, {"type": rng.choice(TYPES)}, True, False, None, 3, "s",
                           {"const": rng.choice(NUMBERS)}])
    kind = rng.choice(TYPES + ["enum", "anyOf", "allOf", "oneOf", "ref", "not", "typelist"])
    s: dict = {}
    if kind == "object":
        props = {rng.choice(KEYS) + str(i): _schema(rng, depth + 1)
                 for i in range(rng.randint(0, 4))}
        s = {"type": "object", "properties": props}
        if props and rng.random() < 0.7:
            s["required"] = rng.sample(list(props), rng.randint(0, len(props)))
        if rng.random() < 0.3:
            s["required"] = s.get("required", []) + ["missing"]
        if rng.random() < 0.5:
            s["additionalProperties"] = rng.choice([False, True, _schema(rng, depth + 1)])
        _bounds(rng, s, "minProperties", "maxProperties")
    elif kind == "array":
        s = {"type": "array"}
        if rng.random() < 0.8:
            s["items"] = _schema(rng, depth + 1)
        if rng.random() < 0.3:
            s["prefixItems"] = [_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        _bounds(rng, s, "minItems", "maxItems")
        if rng.random() < 0.2:
            s["uniqueItems"] = True
    elif kind == "string":
        s = {"type": "string"}
        _bounds(rng, s, "minLength", "maxLength")
        if rng.random() < 0.3:
            s["pattern"] = rng.choice(PATTERNS)
        if rng.random() < 0.2:
            s["format"] = rng.choice(FORMATS)
    elif kind in ("integer", "number"):
        s = {"type": kind}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if rng.random() < 0.35:
                s[key] = rng.choice(NUMBERS)
    elif kind == "enum":
        s = {"enum": [rng.choice(NUMBERS + KEYS + [None, True, [1], {"k": 1}])
                      for _ in range(rng.randint(0, 4))]}
    elif kind in ("anyOf", "allOf", "oneOf"):
        s = {kind: [_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]}
    elif kind == "ref":
        s = {"$ref": rng.choice(["#", "#/definitions/d", "#/$defs/d", "#/nowhere", "http://x/y"]),
             "$defs": {"d": _schema(rng, depth + 1)}, "definitions": {"d": {"type": "integer"}}}
    elif kind == "not":
        s = {"not": _schema(rng, depth + 1)}
    elif kind == "typelist":
        s = {"type": rng.sample(TYPES, rng.randint(0, 3))}
    else:
        s = {"type": kind}
    return s


GBNF_ATOMS = ['"a"', '"{"', '"}"', "[a-z]", "[^\"]", "[{]", "x", "y", "root", '"\\""', "<[12]>",
              "(", ")", "|", "*", "+", "?", " ", "\n", "# c\n", '"\\u00e9"', "[\\]]", "{"]


def _gbnf(rng: random.Random) -> str:
    def body() -> str:
        out = []
        for _ in range(rng.randint(1, 8)):
            atom = rng.choice(GBNF_ATOMS)
            if rng.random() < 0.25 and atom not in ("(", "|", " ", "\n"):
                low, high = rng.randint(0, 6), rng.choice(["", str(rng.randint(0, 6)), "2001"])
                atom += rng.choice([f"{{{low},{high}}}", f"{{{low}}}", f"{{ {low} , {high} }}"])
            out.append(atom)
        return " ".join(out)
    rules = [f"root ::= {body()}"]
    for name in ("x", "y")[:rng.randint(0, 2)]:
        rules.append(f"{name} ::= {body()}")
    return "\n".join(rules)


@pytest.fixture(scope="module")
def client(brisk):
    with brisk.client(timeout=PER_REQUEST_S) as c:
        yield c


def _check(client: httpx.Client, path: str, body: dict, field: str, what) -> str:
    started = time.monotonic()
    try:
        r = client.post(path, json=body)
    except httpx.HTTPError as e:
        raise AssertionError(f"no answer to {what!r}: {e!r}") from e
    took = time.monotonic() - started
    assert took < PER_REQUEST_S, (what, took)
    if r.status_code == 200:
        return "ok"
    err = assert_openai_error(r, 400)
    assert err["param"] == field, (what, err)
    return "refused"


def test_random_json_schemas_are_answered_or_refused_by_name(client):
    rng = random.Random(SEED)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(CASES):
        schema = _schema(rng)
        body = {"messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 2,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "f", "schema": schema}}}
        outcomes[_check(client, "/v1/chat/completions", body, "response_format",
                        json.dumps(schema))] += 1
    assert client.get("/health").status_code == 200
    # The generator must reach both sides of the converter, or it tests nothing.
    print("schemas", outcomes)
    assert outcomes["ok"] >= CASES // 10 and outcomes["refused"] >= CASES // 10, outcomes


def test_random_gbnf_is_answered_or_refused_by_name(client):
    rng = random.Random(SEED + 1)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(CASES):
        grammar = _gbnf(rng)
        body = {"prompt": "x", "max_tokens": 2, "grammar": grammar}
        outcomes[_check(client, "/v1/completions", body, "grammar", grammar)] += 1
    assert client.get("/health").status_code == 200
    print("gbnf", outcomes)
    assert outcomes["ok"] >= CASES // 20 and outcomes["refused"] >= CASES // 10, outcomes


@pytest.mark.parametrize("schema, words", [
    ({"type": "array", "minItems": 5, "maxItems": 3}, "inverted"),
    ({"type": "string", "minLength": 4, "maxLength": 2}, "inverted"),
    ({"type": "integer", "minimum": 5, "maximum": 3}, "admits no value"),
])
def test_contradictory_bounds_are_400s(client, schema, words):
    body = {"messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "f",
                                                                       "schema": schema}}}
    err = assert_openai_error(client.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == "response_format" and words in err["message"], err
    gbnf = {"prompt": "x", "max_tokens": 2, "grammar": 'root ::= "a"{5,3}'}
    err = assert_openai_error(client.post("/v1/completions", json=gbnf), 400)
    assert err["param"] == "grammar" and "{5,3}" in err["message"], err


def test_a_format_that_leaves_no_token_midway_is_a_400_naming_it(client):
    """After "a" this grammar wants a NUL, which no token's text holds: no token can go on.
    The first token passes the compile-time check; the dead end after it is the request's
    fault, not the server's (it was a 500), streamed or not."""
    body = {"prompt": "x", "max_tokens": 8, "grammar": 'root ::= "a" [\\x00]'}
    err = assert_openai_error(client.post("/v1/completions", json=body), 400)
    assert err["param"] == "grammar" and err["code"] == "output_format_dead_end", err
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in sse_lines(r)
                  if line.startswith("data: {")]
    assert events[-1]["error"]["code"] == "output_format_dead_end", events
    assert events[-1]["error"]["param"] == "grammar", events
    assert client.get("/health").status_code == 200
