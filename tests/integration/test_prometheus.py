"""brisk serve under a real Prometheus: promtool accepts its /metrics, Prometheus scrapes it with
the shipped deploy/prometheus/prometheus.yml, and every panel of the shipped Grafana dashboard
(deploy/grafana/brisk-dashboard.json) returns data.

Needs Debian's `prometheus` package (it ships `promtool`); scripts/install-deps.sh installs it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from conftest import (
    MODEL_NAME,
    REPO_ROOT,
    Server,
    _start_brisk,
    _stop_and_check_clean_exit,
    assert_openai_error,
    free_port,
    get_metrics,
    stream_sse,
    sse_lines,
)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "brisk-dashboard.json"
SCRAPE_INTERVAL = "1s"
# Stands in for Grafana's $__rate_interval: long enough to hold the whole scenario below, from
# the first scrape (the baseline every rate needs) to the last.
RATE_WINDOW = "2m"
WAIT_S = 20
VLLM_WAITING = f'vllm:num_requests_waiting{{model_name="{MODEL_NAME}"}}'
COMMAND_TIMEOUT_S = 30


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} not found: install Debian's prometheus package (make deps)",
                    pytrace=False)
    return path


def render_prometheus_config(targets: list[str]) -> str:
    """The shipped config, scraping `targets` every SCRAPE_INTERVAL."""
    text = PROMETHEUS_CONFIG.read_text()
    quoted = ", ".join(f'"{target}"' for target in targets)
    text, n_targets = re.subn(r"targets: \[[^\]]*\]", f"targets: [{quoted}]", text)
    text, n_intervals = re.subn(r"(scrape|evaluation)_interval: \S+",
                                rf"\1_interval: {SCRAPE_INTERVAL}", text)
    assert (n_targets, n_intervals) == (1, 2), \
        f"{PROMETHEUS_CONFIG} changed shape: one targets list and two intervals expected"
    return text


class Prometheus:
    """A prometheus process on loopback with its own storage, and its HTTP query API."""

    def __init__(self, tmp_path: Path, targets: list[str]):
        config = tmp_path / "prometheus.yml"
        config.write_text(render_prometheus_config(targets))
        check = subprocess.run([_need("promtool"), "check", "config", str(config)],
                               capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        assert check.returncode == 0, f"promtool check config:\n{check.stdout}{check.stderr}"
        port = free_port()
        argv = [_need("prometheus"), f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}"]
        self.server = Server(name="prometheus", argv=argv, port=port,
                             log_path=tmp_path / "prometheus.log")

    def __enter__(self) -> Prometheus:
        self.server.start("/-/ready")
        return self

    def __exit__(self, *exc) -> None:
        self.server.terminate()
        self.server.kill()

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query; returns the result vector."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        r = httpx.get(self.server.base_url + "/api/v1/query", params=params, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body.get("status") == "success", \
            f"query {expr!r}: HTTP {r.status_code} {body}"
        assert body["data"]["resultType"] == "vector", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The one sample of an instant query, None when it has none."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr!r} has several series: {result}"
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr: str, want: float) -> None:
        """Polls until the query's one sample equals `want` (Prometheus scraped it)."""
        deadline = time.monotonic() + WAIT_S
        seen = None
        while time.monotonic() < deadline:
            seen = self.value(expr)
            if seen == want:
                return
            time.sleep(0.2)
        pytest.fail(f"Prometheus: {expr} is {seen} after {WAIT_S}s, expected {want}\n"
                    f"log:\n{self.server.log_tail()}")


@dataclass
class Scenario:
    """What the traffic did, as the test saw it."""

    first_token_requests: int = 0
    invalid_requests: int = 0
    waiting_while_held: float | None = None
    running_while_held: float | None = None
    vllm_waiting_while_held: float | None = None
    brisk_metrics_after: dict = field(default_factory=dict)
    metrics_text_before: str = ""
    metrics_text_after: str = ""
    finished_at: float = 0.0


def _send_invalid_request(brisk: Server, scenario: Scenario) -> None:
    r = httpx.post(brisk.base_url + "/v1/completions", timeout=10,
                   json={"model": MODEL_NAME, "prompt": "Hi", "temperature": 9})
    assert_openai_error(r, 400)
    scenario.invalid_requests += 1


def _complete(brisk: Server, max_tokens: int, results: list) -> None:
    r = httpx.post(brisk.base_url + "/v1/completions", timeout=60,
                   json={"model": MODEL_NAME, "prompt": "Count to ten:", "max_tokens": max_tokens,
                         "ignore_eos": True})
    results.append(r.status_code)


def _hold_the_queue(brisk: Server, prometheus: Prometheus, scenario: Scenario) -> None:
    """One long stream runs (--max-seqs 1) while two requests wait; Prometheus must see the two
    waiting. Then the stream is dropped (cancelled) and the two run."""
    results: list = []
    waiters = [threading.Thread(target=_complete, args=(brisk, 4, results)) for _ in range(2)]
    with httpx.stream("POST", brisk.base_url + "/v1/completions", timeout=60,
                      json={"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 600,
                            "ignore_eos": True, "stream": True}) as stream:
        assert stream.status_code == 200
        lines = sse_lines(stream)
        assert any(line.startswith("data: {") for line in lines), "no first token"
        for waiter in waiters:
            waiter.start()
        deadline = time.monotonic() + WAIT_S
        while get_metrics(brisk)["brisk_requests_waiting"] != 2:
            assert time.monotonic() < deadline, "brisk never had two requests waiting"
            time.sleep(0.05)
        prometheus.wait_for("brisk_requests_waiting", 2)
        scenario.waiting_while_held = prometheus.value("brisk_requests_waiting")
        scenario.running_while_held = prometheus.value("brisk_requests_running")
        scenario.vllm_waiting_while_held = prometheus.value(VLLM_WAITING)
    for waiter in waiters:
        waiter.join(timeout=60)
        assert not waiter.is_alive(), "a waiting request never finished"
    assert results == [200, 200], results
    scenario.first_token_requests += 3


def _run_scenario(brisk: Server, prometheus: Prometheus) -> Scenario:
    scenario = Scenario()
    scenario.metrics_text_before = httpx.get(brisk.base_url + "/metrics", timeout=10).text
    prometheus.wait_for('up{job="brisk"}', 1)  # a first scrape: the baseline of every rate
    _send_invalid_request(brisk, scenario)
    # The rejection series must be scraped once before it grows again, or rate() has no increase.
    prometheus.wait_for('brisk_requests_rejected_total{reason="invalid_request"}', 1)
    _hold_the_queue(brisk, prometheus, scenario)
    with brisk.client(timeout=60) as client:
        for i in range(4):
            res = stream_sse(client, "/v1/completions",
                             {"model": MODEL_NAME, "prompt": f"Item {i}:", "max_tokens": 12,
                              "ignore_eos": True, "stream": True})
            assert res.status == 200 and res.done, res.raw_lines
            scenario.first_token_requests += 1
    _send_invalid_request(brisk, scenario)
    scenario.brisk_metrics_after = get_metrics(brisk)
    scenario.metrics_text_after = httpx.get(brisk.base_url + "/metrics", timeout=10).text
    prometheus.wait_for("brisk_time_to_first_token_seconds_count",
                        scenario.first_token_requests)
    prometheus.wait_for('brisk_requests_rejected_total{reason="invalid_request"}',
                        scenario.invalid_requests)
    prometheus.wait_for("brisk_requests_waiting", 0)
    scenario.finished_at = time.time()
    return scenario


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """A brisk serve of its own (its counts are this module's alone), a Prometheus scraping it,
    and the traffic of _run_scenario, already scraped."""
    # No --max-queue-delay-ms: the scenario holds two requests in the queue behind a 600-token
    # stream, which a busy CI machine's step costs priced past 30 s (a refusal, not a wait).
    brisk = _start_brisk(tmp_path_factory, "brisk-prometheus",
                         ["--max-seqs", "1", "--metrics-compat", "vllm",
                          "--max-queue-delay-ms", "0"], api_key=None)
    try:
        with Prometheus(tmp_path_factory.mktemp("prometheus"), [brisk.host_port]) as prometheus:
            yield brisk, prometheus, _run_scenario(brisk, prometheus)
    except BaseException:
        brisk.kill()
        raise
    _stop_and_check_clean_exit(brisk)


# promtool's linter reserves ':' for recording rules; vLLM's names have it by design, and
# routers read them by those names.
VLLM_COLON_LINT = re.compile(r"vllm:\w+ metric names should not contain ':'")
PROMTOOL_LINT_PROBLEMS = 3  # promtool's exit status for lint problems (1: it could not parse)


def _promtool_check_metrics(text: str) -> str:
    """What promtool reports about `text`, but for the colons of vLLM's names; "" if nothing."""
    check = subprocess.run([_need("promtool"), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    problems = [line for line in (check.stdout + check.stderr).splitlines()
                if line.strip() and not VLLM_COLON_LINT.fullmatch(line.strip())]
    allowed_exits = (0, PROMTOOL_LINT_PROBLEMS) if "vllm:" in text else (0,)
    if check.returncode in allowed_exits and not problems:
        return ""
    return f"exit {check.returncode}:\n{check.stdout}{check.stderr}"


def test_promtool_finds_no_problem_in_the_metrics(observed):
    _, _, scenario = observed
    assert "brisk_requests_rejected_total{" in scenario.metrics_text_after  # labelled series too
    assert "vllm:num_requests_waiting{" in scenario.metrics_text_after
    for when, text in (("before traffic", scenario.metrics_text_before),
                       ("after traffic", scenario.metrics_text_after)):
        problems = _promtool_check_metrics(text)
        assert not problems, f"promtool check metrics, {when}: {problems}"


def test_prometheus_scrapes_ttft_count_and_queue(observed):
    brisk, prometheus, scenario = observed
    assert scenario.waiting_while_held == 2
    assert scenario.running_while_held == 1
    assert scenario.vllm_waiting_while_held == 2  # --metrics-compat vllm: the same gauge
    count = prometheus.value("brisk_time_to_first_token_seconds_count")
    assert count == scenario.first_token_requests == 7
    assert count == scenario.brisk_metrics_after["brisk_time_to_first_token_seconds_count"]
    assert prometheus.value("brisk_requests_waiting") == 0
    assert prometheus.value(VLLM_WAITING) == 0
    assert prometheus.value('brisk_requests_rejected_total{reason="invalid_request"}') == 2
    assert prometheus.value('brisk_requests_finished_total{finished_reason="cancelled"}') == 1
    assert prometheus.value(f'up{{job="brisk", instance="{brisk.host_port}"}}') == 1


# --- the Grafana dashboard -------------------------------------------------------------------

def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panel_targets(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel, rows' nested panels included."""
    out = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                out.append((inner["title"], target["expr"]))
    return out


def _substitute_grafana_variables(expr: str, dashboard: dict) -> str:
    for variable in dashboard["templating"]["list"]:
        value = variable.get("allValue") or ".+"
        expr = expr.replace("${" + variable["name"] + "}", value)
        expr = re.sub(r"\$" + variable["name"] + r"\b", value, expr)
    for name in ("__rate_interval", "__interval", "__range"):
        expr = expr.replace("${" + name + "}", RATE_WINDOW).replace("$" + name, RATE_WINDOW)
    assert "$" not in expr, f"a Grafana variable the test does not know is left in {expr!r}"
    return expr


def test_dashboard_is_an_importable_grafana_dashboard():
    dashboard = _dashboard()
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys(), panel
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel
    assert _panel_targets(dashboard)


def test_every_dashboard_panel_has_data(observed):
    brisk, prometheus, scenario = observed
    dashboard = _dashboard()
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["query"]["query"])
        assert match, variable
        r = httpx.get(prometheus.server.base_url + f"/api/v1/label/{match[2]}/values",
                      params={"match[]": match[1]}, timeout=10)
        assert brisk.host_port in r.json()["data"], f"variable {variable['name']}: {r.text}"
    empty = []
    for title, expr in _panel_targets(dashboard):
        result = prometheus.query(_substitute_grafana_variables(expr, dashboard),
                                  at=scenario.finished_at)
        values = [float(sample["value"][1]) for sample in result]
        if not values or not all(math.isfinite(v) for v in values):
            empty.append(f"{title}: {expr} -> {result}")
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
