"""`brisk serve` as a child process, and what /proc says about it (RSS, open descriptors)."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# 1,000 client connections plus the model file, pipes and the log need more descriptors than a
# default soft limit of 1,024; the kernel checks each process's own limit, so both sides raise it.
WANTED_OPEN_FILES = 65536


def raise_open_file_limit() -> int:
    """Raises this process's soft RLIMIT_NOFILE as far as the hard limit allows; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = WANTED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_OPEN_FILES)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def option_value(args: list[str], names: tuple[str, ...], default: str) -> str:
    """The value of a `--flag VALUE` or `--flag=VALUE` among `args` (the last one wins)."""
    value = default
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


@dataclass
class ServerProcess:
    brisk_bin: Path
    model: str
    extra_args: list[str]
    log_path: Path
    ready_timeout_s: float = 120.0
    port: int = 0
    proc: subprocess.Popen | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.port = free_port()
        self.argv = [str(self.brisk_bin), "serve", "--model", self.model,
                     "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         preexec_fn=raise_open_file_limit)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"brisk serve exited with {self.proc.returncode} before it was "
                                   f"ready\ncommand: {' '.join(self.argv)}\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                last = repr(e)
            time.sleep(0.25)
        self.kill()
        raise RuntimeError(f"brisk serve not ready within {self.ready_timeout_s}s ({last})\n"
                           f"{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_status(self) -> int | None:
        """The return code once exited (negative: killed by that signal), None while running."""
        return None if self.proc is None else self.proc.poll()

    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return None

    def cpu_s(self) -> float | None:
        """User + system CPU seconds of the whole server so far (all its threads)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
        except (OSError, ValueError, IndexError):
            return None

    def open_fds(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def fd_kinds(self) -> dict[str, int]:
        """Open descriptors by kind (socket, pipe, anon_inode:[eventfd], a file path...): when a
        count differs, this says what kind of descriptor stayed open."""
        kinds: dict[str, int] = {}
        fd_dir = Path(f"/proc/{self.pid}/fd")
        try:
            entries = list(fd_dir.iterdir())
        except OSError:
            return kinds
        for entry in entries:
            try:
                target = os.readlink(entry)
            except OSError:
                continue
            kind = target.split(":", 1)[0] if target.startswith(("socket:", "pipe:")) else target
            kinds[kind] = kinds.get(kind, 0) + 1
        return dict(sorted(kinds.items()))

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait; the exit status, or None when it had to be killed after timeout_s."""
        if not self.alive():
            return self.exit_status()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "<no log>"
