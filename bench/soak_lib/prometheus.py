"""/metrics over a fresh raw connection (closed at once, so it never counts among the server's
descriptors afterwards), parsed into {'name{labels}': value}."""

from __future__ import annotations

import re

from soak_lib import raw_http

SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        match = SAMPLE_LINE.match(line.strip())
        if match and not line.startswith("#"):
            out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


async def scrape(port: int, timeout_s: float = 10.0) -> dict[str, float] | None:
    """None when the server did not answer in time (itself worth recording, not a crash)."""
    try:
        reader, writer = await raw_http.connect(port, timeout_s)
    except (OSError, TimeoutError):
        return None
    try:
        await raw_http.send(writer, raw_http.http_request("GET", "/metrics",
                                                          headers={"Connection": "close"}))
        response = await raw_http.read_response(reader, timeout_s)
        return parse(response.body.decode()) if response.status == 200 else None
    except (raw_http.ConnectionEnded, OSError):
        return None
    finally:
        raw_http.close(writer)


def by_label(metrics: dict[str, float], name: str, label: str) -> dict[str, float]:
    """{label value: sample} for one labelled counter, e.g. rejections by reason."""
    pattern = re.compile(re.escape(name) + r"\{.*" + label + r'="([^"]*)".*\}$')
    out = {}
    for key, value in metrics.items():
        match = pattern.match(key)
        if match:
            out[match.group(1)] = value
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in sorted(after)
            if after[key] - before.get(key, 0.0)}
