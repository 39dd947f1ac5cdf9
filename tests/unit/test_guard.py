"""The checks a command passes before it runs (disq/server/guard.py's `refusal`), asked
by the RESP dispatch (with the request's arguments) and by `JobService.gate` (with
the queues an HTTP request names): their order, their replies, and the dispatch's
fast path, which skips the call only when none of them can refuse."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from disq.acl import User
from disq.aof.writer import AppendOnlyFile
from disq.config import Config
from disq.errors import DisqError
from disq.ids import new_node_id
from disq.node import Node
from disq.server.app import Server
from disq.server.guard import refusal
from disq.server.table import COMMANDS, CommandSpec

ADDJOB = [b"ADDJOB", b"q", b"body", b"0"]


@pytest.fixture
async def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Server:
    """A server with its node and (off) AOF, as serve() makes them, not serving."""
    monkeypatch.chdir(tmp_path)
    config = Config()
    made = Server(config)
    made.node = Node(config, new_node_id())
    made.aof = AppendOnlyFile(config, made.node, asyncio.get_running_loop())
    return made


def spec(name: bytes) -> CommandSpec:
    return COMMANDS[name]


def user(server: Server, *rules: str, name: str = "bob") -> User:
    return server.acl.set_user(name, ["on", "nopass", *rules], (1, "n"))


def fast_path_skips(server: Server, who: User, command: CommandSpec) -> bool:
    """The dispatch's test (connection.py): True when it does not ask `refusal`."""
    node = server.node
    return not (who.restricted or server.hot.refusing or (
        command.denyoom and node.job_bytes > node.full_bytes))


def reply(error: DisqError | None) -> bytes | None:
    return None if error is None else error.reply()


async def test_nothing_refuses_the_default_user_on_a_healthy_node(server: Server) -> None:
    default = server.acl.default
    for name in (b"addjob", b"getjob", b"ping", b"info"):
        assert fast_path_skips(server, default, spec(name))
        assert refusal(server, default, spec(name), [name]) is None


async def test_a_command_the_user_may_not_run(server: Server) -> None:
    bob = user(server, "+getjob", "~*")
    refused = refusal(server, bob, spec(b"addjob"), ADDJOB)
    assert reply(refused) == (
        b"-NOPERM User bob has no permissions to run the 'addjob' command\r\n")
    assert refusal(server, bob, spec(b"addjob"), None) is not None  # gate: the same
    assert server.acl.denied_cmd == 2
    assert refusal(server, bob, spec(b"getjob"), [b"GETJOB", b"FROM", b"q"]) is None


async def test_the_reply_quotes_128_bytes_of_a_long_name_the_message_all(
        server: Server) -> None:
    """Redis's reply bytes over RESP; the HTTP API's detail names the whole user."""
    name = "é" * 100  # 200 bytes: the reply cuts the 64th character in two
    refused = refusal(server, user(server, name=name), spec(b"addjob"), ADDJOB)
    assert refused is not None and refused.code == "NOPERM"
    assert refused.reply() == (b"-NOPERM User " + name.encode()[:128]
                               + b" has no permissions to run the 'addjob' command\r\n")
    assert refused.message == f"User {name} has no permissions to run the 'addjob' command"


async def test_what_every_user_may_run_over_resp(server: Server) -> None:
    """The subcommands every user may run and the commands run before authenticating
    pass a RESP request; another front end names no subcommand."""
    bob = user(server, "+getjob")
    assert refusal(server, bob, spec(b"acl"), [b"ACL", b"WHOAMI"]) is None
    assert refusal(server, bob, spec(b"acl"), [b"ACL", b"USERS"]) is not None
    assert refusal(server, bob, spec(b"hello"), [b"HELLO"]) is None
    assert refusal(server, bob, spec(b"hello"), None) is not None


async def test_a_queue_the_user_may_not_use(server: Server) -> None:
    bob = user(server, "+@all", "~mine:*")
    key_refusal = b"-NOPERM No permissions to access a key\r\n"
    assert reply(refusal(server, bob, spec(b"addjob"), ADDJOB)) == key_refusal
    assert refusal(server, bob, spec(b"addjob"), [b"ADDJOB", b"mine:q", b"x", b"0"]) is None
    assert reply(refusal(server, bob, spec(b"addjob"), None, [b"q"])) == key_refusal
    assert refusal(server, bob, spec(b"addjob"), None, [b"mine:q"]) is None
    assert server.acl.denied_key == 2


async def test_out_of_memory_refuses_what_takes_memory_not_while_loading(
        server: Server) -> None:
    node = server.node
    node.full_bytes = -1  # over the 95% mark, with nothing that eviction may drop
    node.may_evict = False
    default = server.acl.default
    assert not fast_path_skips(server, default, spec(b"addjob"))
    assert reply(refusal(server, default, spec(b"addjob"), ADDJOB)) == (
        b"-OOM command not allowed when used memory > 'maxmemory'.\r\n")
    assert fast_path_skips(server, default, spec(b"getjob"))  # (no denyoom)
    assert refusal(server, default, spec(b"getjob"), [b"GETJOB", b"FROM", b"q"]) is None
    server.loading = server.hot.refusing = True  # the node's state: -LOADING instead
    assert reply(refusal(server, default, spec(b"addjob"), ADDJOB)) == (
        b"-LOADING Disque is loading the dataset in memory\r\n")


async def test_the_nodes_state_after_the_users_rights(server: Server) -> None:
    """-MISCONF for a write command (and PING) after an AOF write error, -LOADING
    for what may not run while loading; a user's refusal comes first."""
    server.aof.set_error(errno.EIO)
    server.hot.refusing = True  # (the server's reaction to the AOF's status)
    default = server.acl.default
    misconf = b"-MISCONF Errors writing to the AOF file: Input/output error\r\n"
    assert reply(refusal(server, default, spec(b"addjob"), ADDJOB)) == misconf
    assert reply(refusal(server, default, spec(b"ping"), [b"PING"])) == misconf
    assert refusal(server, default, spec(b"info"), [b"INFO"]) is None
    first = refusal(server, default, spec(b"ping"), [b"PING"])
    assert first is not refusal(server, default, spec(b"ping"), [b"PING"])  # fresh each
    bob = user(server, "+getjob")
    refused = refusal(server, bob, spec(b"addjob"), ADDJOB)
    assert refused is not None and refused.code == "NOPERM"
    server.aof.set_error(0)
    server.loading = True
    assert reply(refusal(server, default, spec(b"addjob"), ADDJOB)) == (
        b"-LOADING Disque is loading the dataset in memory\r\n")
    assert refusal(server, default, spec(b"info"), [b"INFO"]) is None  # ("l": loading)
