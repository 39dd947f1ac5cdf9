"""What each measured system's wire protocol looks like to the load generator.

A `System` builds request bytes and reads replies for three operations: produce a
job, fetch jobs (one, blocking with a timeout; or a batch, for drains), and
acknowledge them. disq speaks Disque's commands (ADDJOB / GETJOB / ACKJOB), as
antirez's Disque itself does (the same requests, another name in the report),
redis-server is used as a list queue (RPUSH / BLPOP or LPOP count, nothing to ack),
beanstalkd speaks its text protocol (put / reserve-with-timeout / delete).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import hiredis

STAMP = 19  # digits of the produce time (monotonic ns) at the start of every body


def bulks(*args: bytes) -> bytes:
    """RESP bulk strings, one after the other."""
    return b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


def resp(*args: bytes) -> bytes:
    """One request in RESP multibulk form."""
    return b"*%d\r\n" % len(args) + bulks(*args)


def stamp_of(body: bytes) -> int:
    """The produce time (monotonic ns) a body carries, or -1."""
    head = body[:STAMP]
    return int(head) if head.isdigit() else -1


class BeanstalkReader:
    """Incremental reader of beanstalkd replies, with hiredis.Reader's feed/gets:
    gets() returns False until a whole reply is buffered, then a tuple of the reply
    line's words, with the job body appended for RESERVED."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def gets(self) -> tuple[bytes, ...] | bool:
        end = self.buf.find(b"\r\n")
        if end < 0:
            return False
        words = bytes(self.buf[:end]).split()
        if words and words[0] == b"RESERVED":
            stop = end + 2 + int(words[2]) + 2
            if len(self.buf) < stop:
                return False
            body = bytes(self.buf[end + 2:stop - 2])
            del self.buf[:stop]
            return (*words, body)
        del self.buf[:end + 2]
        return tuple(words)


def read_one(sock: socket.socket, reader: Any) -> Any:
    """Block until one whole reply is read."""
    while True:
        reply = reader.gets()
        if reply is not False:
            return reply
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by the server")
        reader.feed(data)


@dataclass
class Jobs:
    """What a fetch returned: (id for the ack or None, body) pairs, or an error."""
    items: list[tuple[bytes | None, bytes]]
    error: str | None = None


class System:
    """Base class: the names each operation shows in the report."""

    name = ""
    produce_name = ""
    fetch_name = ""
    drain_name = ""
    ack_name = ""  # "" when jobs need no ack

    def __init__(self, queue: str, body_size: int, options: dict[str, Any]) -> None:
        self.queue = queue.encode()
        self.body_size = body_size
        self.pad = b"x" * (body_size - STAMP)
        self.options = options

    def reader(self) -> Any:
        return hiredis.Reader()

    def setup(self, role: str) -> list[bytes]:
        """Requests to send once on a new connection (one reply each, not measured)."""
        return []

    def produce(self, body: bytes) -> bytes:
        raise NotImplementedError

    def fetch(self, batch: int, timeout_ms: int) -> bytes:
        """One fetch request: blocking up to timeout_ms (0: do not block)."""
        raise NotImplementedError

    def produced(self, reply: Any) -> str | None:
        """None when the reply confirms the job, else the error text."""
        raise NotImplementedError

    def fetched(self, reply: Any) -> Jobs:
        raise NotImplementedError

    def ack(self, ids: list[bytes]) -> list[bytes]:
        """Requests that acknowledge these jobs (empty when nothing is acked)."""
        return []

    def acked(self, reply: Any) -> tuple[int, str | None]:
        """(jobs acknowledged, error text or None)."""
        return 0, None


class Disq(System):
    name = "disq"
    produce_name = "ADDJOB"
    fetch_name = "GETJOB"
    drain_name = "GETJOB"
    ack_name = "ACKJOB"

    def __init__(self, queue: str, body_size: int, options: dict[str, Any]) -> None:
        super().__init__(queue, body_size, options)
        rest = [str(options.get("addjob_timeout", 0)).encode()]
        if options.get("replicate"):
            rest += [b"REPLICATE", str(options["replicate"]).encode()]
        if options.get("retry") is not None:
            rest += [b"RETRY", str(options["retry"]).encode()]
        if options.get("async"):
            rest.append(b"ASYNC")
        # ADDJOB queue <body> rest...: the body goes between a fixed head and tail
        self.head = (b"*%d\r\n" % (3 + len(rest)) + bulks(b"ADDJOB", self.queue)
                     + b"$%d\r\n" % body_size)
        self.tail = b"\r\n" + bulks(*rest)
        self.ack_command = b"FASTACK" if options.get("ack") == "fastack" else b"ACKJOB"
        self.ack_name = self.ack_command.decode() if options.get("ack") != "none" else ""

    def produce(self, body: bytes) -> bytes:
        return self.head + body + self.tail

    def fetch(self, batch: int, timeout_ms: int) -> bytes:
        wait = [b"TIMEOUT", str(timeout_ms).encode()] if timeout_ms else [b"NOHANG"]
        return resp(b"GETJOB", *wait, b"COUNT", str(batch).encode(), b"FROM", self.queue)

    def produced(self, reply: Any) -> str | None:
        if isinstance(reply, hiredis.ReplyError):
            return str(reply)
        return None if isinstance(reply, bytes) and reply.startswith(b"D-") else repr(reply)

    def fetched(self, reply: Any) -> Jobs:
        if reply is None:
            return Jobs([])
        if isinstance(reply, hiredis.ReplyError):
            return Jobs([], str(reply))
        return Jobs([(job[1], job[2]) for job in reply])

    def ack(self, ids: list[bytes]) -> list[bytes]:
        return [resp(self.ack_command, *ids)] if self.ack_name and ids else []

    def acked(self, reply: Any) -> tuple[int, str | None]:
        if isinstance(reply, int):
            return reply, None
        return 0, str(reply)


class Redis(System):
    """redis-server as a list queue."""

    name = "redis"
    produce_name = "RPUSH"
    fetch_name = "BLPOP"
    drain_name = "LPOP"

    def __init__(self, queue: str, body_size: int, options: dict[str, Any]) -> None:
        super().__init__(queue, body_size, options)
        self.head = b"*3\r\n$5\r\nRPUSH\r\n$%d\r\n%s\r\n$%d\r\n" % (
            len(self.queue), self.queue, body_size)

    def produce(self, body: bytes) -> bytes:
        return self.head + body + b"\r\n"

    def fetch(self, batch: int, timeout_ms: int) -> bytes:
        if batch > 1 or not timeout_ms:
            return resp(b"LPOP", self.queue, str(batch).encode())
        return resp(b"BLPOP", self.queue, b"%.3f" % (timeout_ms / 1000))

    def produced(self, reply: Any) -> str | None:
        return None if isinstance(reply, int) else str(reply)

    def fetched(self, reply: Any) -> Jobs:
        if reply is None:
            return Jobs([])
        if isinstance(reply, hiredis.ReplyError):
            return Jobs([], str(reply))
        if len(reply) == 2 and reply[0] == self.queue:  # BLPOP: [queue, body]
            return Jobs([(None, reply[1])])
        return Jobs([(None, body) for body in reply])  # LPOP q count


class Beanstalkd(System):
    name = "beanstalkd"
    produce_name = "put"
    fetch_name = "reserve"
    drain_name = "reserve"
    ack_name = "delete"

    def __init__(self, queue: str, body_size: int, options: dict[str, Any]) -> None:
        super().__init__(queue, body_size, options)
        self.head = b"put 0 0 120 %d\r\n" % body_size
        if options.get("ack") == "none":
            self.ack_name = ""

    def reader(self) -> Any:
        return BeanstalkReader()

    def setup(self, role: str) -> list[bytes]:
        if role == "producer":
            return [b"use %s\r\n" % self.queue]
        return [b"watch %s\r\n" % self.queue, b"ignore default\r\n"]

    def produce(self, body: bytes) -> bytes:
        return self.head + body + b"\r\n"

    def fetch(self, batch: int, timeout_ms: int) -> bytes:
        return b"reserve-with-timeout %d\r\n" % ((timeout_ms + 999) // 1000)

    def produced(self, reply: Any) -> str | None:
        return None if reply[0] == b"INSERTED" else b" ".join(reply[:3]).decode()

    def fetched(self, reply: Any) -> Jobs:
        if reply[0] == b"RESERVED":
            return Jobs([(reply[1], reply[3])])
        if reply[0] in (b"TIMED_OUT", b"DEADLINE_SOON"):
            return Jobs([])
        return Jobs([], b" ".join(reply).decode())

    def ack(self, ids: list[bytes]) -> list[bytes]:
        return [b"delete %s\r\n" % job_id for job_id in ids] if self.ack_name else []

    def acked(self, reply: Any) -> tuple[int, str | None]:
        if reply[0] == b"DELETED":
            return 1, None
        return 0, b" ".join(reply).decode()


class Disque(Disq):
    """antirez's Disque: the same commands as disq."""

    name = "disque"


SYSTEMS: dict[str, type[System]] = {"disq": Disq, "disque": Disque, "redis": Redis,
                                    "beanstalkd": Beanstalkd}
