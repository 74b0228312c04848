"""Fails the run on any sanitizer report from a process the tests started.

`make sanitize` and `make sanitize-thread` run the integration tests against an instrumented
brisk. A report in `brisk serve`'s stderr is easy to miss: the server may die and only a later
test notices, `brisk bench` output is captured and thrown away, and a test that expects a
failing exit code would even pass. So when BRISK_SANITIZER_REPORT_DIR is set, every sanitizer
writes its reports there instead (log_path), and this plugin fails the test during which a new
report appeared, and the session for any report written after the last test (LeakSanitizer's,
when a session's servers exit).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPORT_DIR_VARIABLE = "BRISK_SANITIZER_REPORT_DIR"
SANITIZER_OPTION_VARIABLES = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")
# A process that found something may still be writing its report (stacks of every thread).
REPORT_WRITE_GRACE_S = 2


def _report_dir() -> Path | None:
    value = os.environ.get(REPORT_DIR_VARIABLE)
    return Path(value) if value else None


def running_under_a_sanitizer() -> bool:
    """True in `make sanitize` / `make sanitize-thread`: the binaries run several times slower."""
    return _report_dir() is not None


def _route_reports_to(directory: Path) -> None:
    """Makes every child process write its sanitizer reports into `directory`/report.<pid>."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("report.*"):  # an earlier run's, already reported by it
        stale.unlink()
    for variable in SANITIZER_OPTION_VARIABLES:
        options = [o for o in os.environ.get(variable, "").split(":") if o]
        options = [o for o in options if not o.startswith("log_path=")]
        os.environ[variable] = ":".join([*options, f"log_path={directory / 'report'}"])


class _ReportLedger:
    """How much of each report file a check has already failed on. A process that goes on after
    a report (a sanitizer run without halt_on_error) appends to its file, so sizes count."""

    def __init__(self) -> None:
        self._reported_bytes: dict[Path, int] = {}

    def _grown(self, directory: Path) -> list[Path]:
        return sorted(p for p in directory.glob("report.*")
                      if p.stat().st_size > self._reported_bytes.get(p, 0))

    def take_new_text(self, directory: Path) -> str:
        """The report text no check has seen yet (empty if none); marks it seen."""
        if not self._grown(directory):
            return ""
        time.sleep(REPORT_WRITE_GRACE_S)
        parts = []
        for path in self._grown(directory):
            data = path.read_bytes()
            parts.append(f"==== {path}\n"
                         + data[self._reported_bytes.get(path, 0):].decode(errors="replace"))
            self._reported_bytes[path] = len(data)
        return "\n".join(parts)


_ledger = _ReportLedger()


def pytest_configure(config):
    directory = _report_dir()
    if directory is not None:
        _route_reports_to(directory)


@pytest.fixture(scope="session", autouse=True)
def _no_sanitizer_report_after_the_tests():
    """Torn down after every other session fixture, so it sees the reports of servers that
    exit at the end of the session (leaks are reported at exit)."""
    yield
    directory = _report_dir()
    if directory is not None and (text := _ledger.take_new_text(directory)):
        pytest.fail(f"sanitizer report(s) at the end of the session:\n{text}", pytrace=False)


@pytest.fixture(autouse=True)
def _no_sanitizer_report_during_the_test():
    yield
    directory = _report_dir()
    if directory is not None and (text := _ledger.take_new_text(directory)):
        # Written during this test, or between it and the one before (a module's fixture).
        pytest.fail(f"sanitizer report(s) written by the end of this test:\n{text}",
                    pytrace=False)
