"""Seeded random input: whatever arrives, the node answers or closes that one
connection, keeps serving everyone else, and loses no job."""

from __future__ import annotations

import random
import socket
import time

from support import raw_command

VALID = [
    b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$4\r\nbody\r\n$1\r\n0\r\n",
    b"*5\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$5\r\nCOUNT\r\n$1\r\n2\r\n$4\r\nFROM\r\n",
    b"*2\r\n$4\r\nQLEN\r\n$1\r\nq\r\n",
    b"*3\r\n$5\r\nQPEEK\r\n$1\r\nq\r\n$2\r\n-1\r\n",
    b"*2\r\n$4\r\nSHOW\r\n$40\r\nD-00000000-aaaaaaaaaaaaaaaaaaaaaaaa-05a1\r\n",
    b"*2\r\n$6\r\nACKJOB\r\n$3\r\nbad\r\n",
    b"*3\r\n$5\r\nJSCAN\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n",
    b"PING hello\r\n",
    b"*1\r\n$4\r\nINFO\r\n",
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] = rng.randrange(256)
        elif op == 1:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and out:
            del out[pos:pos + rng.randint(1, 8)]
        else:
            out[pos:pos] = rng.choice([b"\r\n", b"*", b"$", b"-1", b"999999", b"\x00"])
    return bytes(out)


def test_random_input_never_hurts_the_node(node):
    rng = random.Random(7711)
    with node.connect() as keeper:
        job_id = raw_command(keeper, VALID[0])
        assert job_id.startswith(b"+D-")
        deadline = time.monotonic() + 20
        for _ in range(300):
            assert time.monotonic() < deadline
            payload = b"".join(mutate(rng, rng.choice(VALID)) if rng.random() < 0.7
                               else rng.choice(VALID) for _ in range(rng.randint(1, 6)))
            with socket.create_connection(("127.0.0.1", node.port), timeout=5) as s:
                s.settimeout(0.2)
                try:
                    s.sendall(payload)
                    s.recv(65536)  # an answer, a close or silence (half a request)
                except (TimeoutError, ConnectionResetError, BrokenPipeError):
                    pass
        # the untouched connection still works and its job is intact
        keeper.sendall(b"*2\r\n$4\r\nSHOW\r\n$40\r\n" + job_id[1:41] + b"\r\n")
        shown = b""
        while not shown.endswith(b"body\r\n"):
            chunk = keeper.recv(65536)
            assert chunk, "the node closed an innocent connection"
            shown += chunk
        assert job_id[1:41] in shown
        assert raw_command(keeper, b"PING\r\n") == b"+PONG\r\n"
    assert "Traceback" not in node.log()
