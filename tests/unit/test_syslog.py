"""syslog-enabled: the log also goes to the syslog socket, as Redis's syslog() does.
A unix datagram socket in a temporary directory stands in for /dev/log."""

from __future__ import annotations

import logging
import logging.handlers
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from disq.config import Config
from disq.server.process import log, setup_logging


@pytest.fixture
def restore_log() -> Iterator[None]:
    handlers, level = list(log.handlers), log.level
    yield
    for handler in log.handlers:
        handler.close()
    log.handlers[:] = handlers
    log.setLevel(level)


def test_syslog_gets_ident_pid_facility_and_redis_priorities(
        tmp_path: Path, restore_log: None) -> None:
    address = str(tmp_path / "log")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as syslogd:
        syslogd.bind(address)
        syslogd.settimeout(5)
        config = Config()
        config.load_text("syslog-enabled yes\nsyslog-ident myq\nsyslog-facility LOCAL3\n"
                         f"logfile {tmp_path / 'disq.log'}\nloglevel verbose\n")
        setup_logging(config, syslog_address=address)
        log.info("ready to accept connections")
        log.log(15, "a verbose line")
        log.warning("a warning")
        local3 = 19 << 3
        pid = os.getpid()
        assert syslogd.recv(4096) == b"<%d>myq[%d]: ready to accept connections\x00" % (
            local3 | 5, pid)  # notice
        assert syslogd.recv(4096) == b"<%d>myq[%d]: a verbose line\x00" % (local3 | 6, pid)
        assert syslogd.recv(4096) == b"<%d>myq[%d]: a warning\x00" % (local3 | 4, pid)
    assert "ready to accept connections" in (tmp_path / "disq.log").read_text()


def test_syslog_that_cannot_be_reached_stops_the_start(
        tmp_path: Path, restore_log: None) -> None:
    config = Config()
    config.apply("syslog-enabled", ["yes"])
    with pytest.raises(SystemExit) as exc:
        setup_logging(config, syslog_address=str(tmp_path / "nothing-here"))
    assert "syslog-enabled yes: can't reach the syslog at" in str(exc.value)


def test_no_syslog_by_default(restore_log: None) -> None:
    setup_logging(Config())
    assert not any(isinstance(h, logging.handlers.SysLogHandler) for h in log.handlers)
