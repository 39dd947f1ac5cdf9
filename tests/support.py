"""Real disq-server processes for the tests: free loopback ports, a private directory,
bounded start-up, and a stop by PID that always happens."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

START_TIMEOUT = 15.0


def free_port() -> int:
    """A port free on 127.0.0.1 whose bus port (port + 10000) is free as well."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found")


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01,
             message: str = "condition") -> Any:
    """Poll `condition` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class DisqProcess:
    """One disq-server started on 127.0.0.1 in its own directory."""

    def __init__(self, workdir: Path, *args: str, port: int | None = None,
                 config_text: str | None = None) -> None:
        self.port = port or free_port()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.config_text = config_text
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "disq.log"

    def command_line(self) -> list[str]:
        cmd = [sys.executable, "-m", "disq"]
        if self.config_text is not None:
            conf = self.dir / "disq.conf"
            conf.write_text(self.config_text)
            cmd.append(str(conf))
        cmd += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        return cmd + self.args

    def start(self) -> DisqProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command_line(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.dir)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"disq-server exited with {self.proc.returncode}:\n"
                                   + self.log_path.read_text(errors="replace"))
            # no retries inside redis-py (4 s of backoff on NOAUTH): this loop retries
            probe = self.client(socket_timeout=1, retry=Retry(NoBackoff(), 0))
            try:
                if probe.ping():
                    return self
            except redis.exceptions.AuthenticationError:
                return self  # answering: NOAUTH to redis-py's HELLO (--requirepass)
            except redis.exceptions.ConnectionError:
                pass
            except redis.exceptions.ResponseError:
                return self  # answering, e.g. NOAUTH
            finally:
                probe.close()  # else it holds a client slot until garbage collection
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("disq-server did not answer PING in time")
            time.sleep(0.02)

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return sock

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def raw_command(sock: socket.socket, payload: bytes, expect_close: bool = False,
                timeout: float = 5.0) -> bytes:
    """Send raw bytes and read what comes back until a full line set arrives or the
    server closes the connection (when expect_close)."""
    sock.settimeout(timeout)
    sock.sendall(payload)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
        if not expect_close and data.endswith(b"\r\n"):
            break
    return data
