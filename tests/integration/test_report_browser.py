"""brisk bench's and brisk doctor's report.html in a real browser: headless Chromium (Debian's
`chromium`), driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: no port, no
extra package).

The reports are made by a real short `brisk bench` and `brisk doctor` run against the session's
brisk serve. The tests check that every canvas of bench's report holds a Chart.js chart whose
points were laid out inside its plot area and painted in the first series' colour, that each
report's table of numbers shows every load point (probe point) with the values of its
result.json (report.json), and that the page logged no error. A screenshot is saved under the
test's tmp dir and its path printed. Offline: report.html inlines Chart.js.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BRISK_BIN, require_file

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

CHROMIUM = shutil.which("chromium")
DEVTOOLS_TIMEOUT_S = 20
# The first colour of the report's palette (#1f77b4), which every chart's first series uses.
FIRST_SERIES_RGB = (0x1F, 0x77, 0xB4)

CHART_PROBE = """
(() => [...document.querySelectorAll('canvas')].map(canvas => {
  const chart = Chart.getChart(canvas);
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  // Pixels of the first series' colour inside the plot area (the legend, outside it, has
  // that colour too).
  const area = chart ? chart.chartArea : {left: 0, right: 0, top: 0, bottom: 0};
  const ratio = chart ? chart.currentDevicePixelRatio : 1;
  let painted = 0, series = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 3] === 0) continue;
    painted++;
    const x = (i / 4) %% canvas.width / ratio, y = Math.floor(i / 4 / canvas.width) / ratio;
    if (x < area.left || x > area.right || y < area.top || y > area.bottom) continue;
    if (Math.abs(pixels[i] - %d) <= 6 && Math.abs(pixels[i + 1] - %d) <= 6 &&
        Math.abs(pixels[i + 2] - %d) <= 6) series++;
  }
  let points = 0, inside = 0;
  if (chart) {
    chart.data.datasets.forEach((_, index) => chart.getDatasetMeta(index).data.forEach(point => {
      points++;
      if (Number.isFinite(point.x) && Number.isFinite(point.y) &&
          point.x >= area.left - 1 && point.x <= area.right + 1 &&
          point.y >= area.top - 1 && point.y <= area.bottom + 1) inside++;
    }));
  }
  return {id: canvas.id, chart: !!chart, width: canvas.width, height: canvas.height,
          painted, series, points, inside};
}))()
""" % FIRST_SERIES_RGB


class DevTools:
    """One headless Chromium and a page in it, spoken to over --remote-debugging-pipe: Chromium
    reads commands on its fd 3 and writes replies and events on fd 4, each a JSON text ending in
    a NUL byte."""

    def __init__(self, profile_dir: Path, log_path: Path):
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # Copies at 10 or above, out of the way of 3 and 4, so that the dup2s below cannot
        # overwrite each other; close-on-exec, so that only 3 and 4 reach Chromium.
        child_read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD_CLOEXEC, 10)
        child_write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_read)
        os.close(from_browser_write)

        def give_pipes_fds_3_and_4():
            os.dup2(child_read, 3)
            os.dup2(child_write, 4)

        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", f"--user-data-dir={profile_dir}",
             "--window-size=1400,1100", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            # close_fds=False: the fds 3 and 4 made in the child must survive; the parent's
            # other fds are close-on-exec already (PEP 446).
            preexec_fn=give_pipes_fds_3_and_4, close_fds=False)
        os.close(child_read)
        os.close(child_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, timeout: float = DEVTOOLS_TIMEOUT_S):
        """Sends a command (to the page once attached) and returns its result; events that
        arrive meanwhile are kept in `events`."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self._read_until(lambda m: m.get("id") == self._next_id, timeout, method)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]

    def wait_for_event(self, method: str, timeout: float = DEVTOOLS_TIMEOUT_S) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        return self._read_until(lambda m: m.get("method") == method, timeout, method)

    def _read_until(self, wanted, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if wanted(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                pytest.fail(f"no answer from Chromium to {what} within {timeout}s "
                            f"(exit code {self.proc.poll()})")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    pytest.fail(f"Chromium closed the DevTools pipe while waiting for {what}")
                self._buffer += chunk

    def open_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True})
        self.session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                os.write(self._to_browser, json.dumps(
                    {"id": 0, "method": "Browser.close"}).encode() + b"\0")
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            self._log.close()


def page_errors(events: list[dict]) -> list[str]:
    errors = []
    for event in events:
        params = event.get("params", {})
        if event.get("method") == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            errors.append(details.get("exception", {}).get("description") or details["text"])
        elif event.get("method") == "Runtime.consoleAPICalled" and params["type"] in (
                "error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif event.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(params["entry"]["text"])
    return errors


def made_report(tmp_path_factory, verb: str, *args: str) -> Path:
    """report.html of a real `brisk VERB ARGS --out DIR` run."""
    require_file(BRISK_BIN, "build brisk first (make)")
    out = tmp_path_factory.mktemp(verb)
    proc = subprocess.run([str(BRISK_BIN), verb, *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "report.html"


@pytest.fixture(scope="module")
def bench_report(brisk, tmp_path_factory) -> Path:
    return made_report(tmp_path_factory, "bench", "--url", brisk.base_url, "--concurrency", "1,2",
                       "--num-requests", "3", "--warmup-requests", "1", "--input-tokens", "16",
                       "--output-tokens", "4")


def render(report: Path, work_dir: Path) -> tuple[list[dict], list[str], Path]:
    """Opens `report` in headless Chromium: what CHART_PROBE found on each canvas, the errors the
    page logged, and a screenshot."""
    with loaded_page(report, work_dir) as browser:
        charts = browser.send("Runtime.evaluate", {"expression": CHART_PROBE,
                                                   "returnByValue": True})["result"]["value"]
        shot = browser.send("Page.captureScreenshot",
                            {"format": "png", "captureBeyondViewport": True})
        screenshot = work_dir / (report.stem + ".png")
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        return charts, page_errors(browser.events), screenshot


@contextlib.contextmanager
def loaded_page(report: Path, work_dir: Path):
    """Headless Chromium with `report` loaded; yields its DevTools connection."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/install-deps.sh", pytrace=False)
    browser = DevTools(work_dir / "chromium-profile", work_dir / "chromium.log")
    try:
        browser.open_page()
        browser.send("Page.navigate", {"url": report.resolve().as_uri()})
        browser.wait_for_event("Page.loadEventFired")
        yield browser
    finally:
        browser.close()


def chart_problems(charts: list[dict]) -> list[str]:
    problems = []
    ids = [chart["id"] for chart in charts]
    if ids != ["curve", "inflight", "ttft", "itl"]:
        problems.append(f"canvases {ids}")
    for chart in charts:
        if not chart["chart"]:
            problems.append(f"no Chart.js chart on canvas {chart['id']}")
        elif chart["points"] == 0:
            problems.append(f"chart {chart['id']} has no data points")
        elif chart["inside"] != chart["points"]:
            problems.append(f"chart {chart['id']}: points outside the plot area: {chart}")
        if chart["series"] == 0:
            problems.append(f"chart {chart['id']} painted none of its first series: {chart}")
    return problems


def test_report_draws_every_chart_in_chromium(bench_report, tmp_path, capsys):
    charts, errors, screenshot = render(bench_report, tmp_path)
    with capsys.disabled():  # shown even when pytest captures output
        print(f"\nscreenshot of report.html: {screenshot}")
    assert chart_problems(charts) == [], charts
    assert errors == [], f"the page logged errors: {errors}"
    for chart in charts:
        assert chart["width"] > 100 and chart["height"] > 50, chart
    assert screenshot.stat().st_size > 10_000  # a blank page of this size is ~5 kB


TABLE_PROBE = """(() => Array.from(document.querySelectorAll('#numbers tbody tr'))
    .map(tr => Array.from(tr.cells).map(td => td.textContent)))()"""


def table_rows(report: Path, work_dir: Path) -> list[list[str]]:
    """The numbers table's cells as the browser shows them."""
    with loaded_page(report, work_dir) as browser:
        return browser.send("Runtime.evaluate", {"expression": TABLE_PROBE,
                                                 "returnByValue": True})["result"]["value"]


def test_report_shows_the_numbers_of_every_load_point_in_a_table(bench_report, tmp_path):
    rows = table_rows(bench_report, tmp_path)
    result = json.loads((bench_report.parent / "result.json").read_text())
    assert len(rows) == len(result["runs"]) == 2, rows
    for row, run in zip(rows, result["runs"]):
        assert row[0] == f"concurrency {run['load']['concurrency']}"
        assert row[1:3] == [str(run["requests"]["ok"]), str(run["requests"]["failed"])]
        ttft, e2e = run["ttft_ms"], run["e2e_ms"]
        assert row[3:7] == [f"{ttft[k]:.1f}" for k in ("mean", "p50", "p95", "p99")], row
        assert row[7:11] == [f"{e2e[k]:.1f}" for k in ("mean", "p50", "p95", "p99")], row
        assert row[11:13] == [f"{run['tpot_ms'][k]:.2f}" for k in ("p50", "p99")], row
        assert row[13:15] == [f"{run['request_throughput']:.2f}",
                              f"{run['output_token_throughput']:.1f}"], row
        assert row[15:17] == ["—", "—"]  # no --slo, no --usd-per-hour
        # brisk serve's /metrics: what its prefix cache reused during the run.
        assert row[17] == f"{run['server']['prefix_cache_hit_rate'] * 100:.1f}", (row, run)
        assert row[18] == f"{run['server']['preemptions']:.0f}"


def test_a_report_whose_chart_fails_is_caught(bench_report, tmp_path):
    """The checks can fail: a script error that leaves the ITL canvas empty shows in both."""
    broken = tmp_path / "broken.html"
    text = bench_report.read_text()
    assert text.count("chart('itl'") == 1
    broken.write_text(text.replace("chart('itl'", "chart('no-such-canvas'"))
    charts, errors, _ = render(broken, tmp_path)
    assert "no Chart.js chart on canvas itl" in chart_problems(charts)
    assert errors, "the failed chart logged no error"


@pytest.fixture(scope="module")
def doctor_report(brisk, tmp_path_factory) -> Path:
    return made_report(tmp_path_factory, "doctor", "--url", brisk.base_url, "--budget", "20",
                       "--max-concurrency", "2", "--short-input-tokens", "16",
                       "--long-input-tokens", "48", "--usd-per-hour", "2.5", "--progress", "off")


def doctor_points(measurements: dict) -> list[dict]:
    """The probe points doctor's table lists, in its order: every one measured, the ramp's first
    (the short baseline again) once."""
    probe = measurements["probe"]
    points = [probe["cold"], probe["short"], probe["long"], *probe["ramp"][1:], probe["prefix"],
              probe["mixed_short"], probe["mixed_long"]]
    return [point for point in points if point["ok"] > 0]


def fixed(value, decimals: int = 1) -> str:
    return "—" if value is None else f"{value:.{decimals}f}"


def test_doctor_report_shows_the_numbers_of_every_probe_point_in_a_table(doctor_report, tmp_path):
    with loaded_page(doctor_report, tmp_path) as browser:
        rows = browser.send("Runtime.evaluate", {"expression": TABLE_PROBE,
                                                 "returnByValue": True})["result"]["value"]
        errors = page_errors(browser.events)
    assert errors == [], f"the page logged errors: {errors}"
    measurements = json.loads((doctor_report.parent / "report.json").read_text())["measurements"]
    points = doctor_points(measurements)
    # However far the budget let the probe go (on a shared machine, maybe only the first
    # stages), the table lists exactly what report.json measured.
    assert points and len(rows) == len(points), rows
    for row, point in zip(rows, points):
        assert row[:4] == [point["stage"], str(point["concurrency"]), str(point["ok"]),
                           str(point["failed"])], row
        for cells, latency in ((row[4:8], point["ttft_ms"]), (row[8:12], point["e2e_ms"]),
                               (row[12:14], point["itl_ms"])):
            keys = ("mean", "p50", "p95", "p99") if len(cells) == 4 else ("p50", "p99")
            assert cells == [fixed(latency[k] if latency["count"] else None) for k in keys], row
        assert row[14] == f"{point['output_tokens_per_s']:.1f}", row
        used = point["resources"]
        gpu = used["gpu_utilization_mean"]
        memory = used["gpu_memory_used_bytes_max"]
        assert row[15:17] == [fixed(None if gpu is None else gpu * 100),
                              fixed(None if memory is None else memory / 2**30, 2)], row
        # The server runs here: its CPU and the host's are known for every point.
        assert row[17:19] == [fixed(used["server_cores_mean"], 2),
                              fixed(used["host_busy_cores_mean"], 2)], row
        assert "—" not in row[17:19], row
        # --usd-per-hour 2.5 at this point's throughput.
        assert row[19] == f"{2.5 / 3600 / point['output_tokens_per_s'] * 1e6:.3f}", row

