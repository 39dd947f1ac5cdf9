"""The commands' declarations (disq/server/table.py) are the one source of what a command
is: the generated reference page matches them, every command declares who may run it
and its docs, where it names queues and job IDs is found in its arguments, and the
Python client takes every option the server parses."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from disq_client import spec
from disq_client.aio import AsyncClient
from disq_client.client import Client

from disq.acl import CATEGORIES as ACL_CATEGORIES
from disq.server.commanddocs import render
from disq.server.commands import load_commands
from disq.server.table import CATEGORIES

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "commands.md"


def test_the_command_reference_page_is_generated_from_the_declarations() -> None:
    assert REFERENCE.read_text() == render(), (
        "docs/reference/commands.md is stale: run "
        "`python -m disq.server.commanddocs > docs/reference/commands.md`")


def test_every_command_declares_its_categories_and_docs() -> None:
    commands = load_commands()
    assert len(commands) >= 39
    for spec_ in commands.values():
        assert spec_.categories and set(spec_.categories) <= set(ACL_CATEGORIES), spec_.name
        assert CATEGORIES[spec_.name] == spec_.categories
        assert spec_.syntax.split()[0].lower() == spec_.name, spec_.name
        assert spec_.summary and spec_.reply


def _where(name: bytes, kind: str, *args: bytes) -> list[bytes]:
    found = getattr(load_commands()[name], kind)
    assert found is not None, (name, kind)
    result: list[bytes] = found.find([name, *args])
    return result


@pytest.mark.parametrize(("name", "kind", "args", "expected"), [
    (b"addjob", "queues", (b"q", b"body", b"0"), [b"q"]),
    (b"getjob", "queues", (b"TIMEOUT", b"10", b"from", b"a", b"b"), [b"a", b"b"]),
    (b"qpolicy", "queues", (b"q", b"SET", b"DEADLETTER", b"dlq"), [b"q", b"dlq"]),
    (b"qpolicy", "queues", (b"q", b"GET"), [b"q"]),
    (b"cron", "queues", (b"ADD", b"tick", b"q", b"* * * * *", b"x"), [b"q"]),
    (b"cron", "queues", (b"LIST",), []),
    (b"deadletter", "queues", (b"requeue", b"dead:q"), [b"dead:q"]),
    (b"replay", "queues", (b"q", b"FROM", b"1", b"INTO", b"q2"), [b"q", b"q2"]),
    (b"retained", "queues", (b"q", b"FROM", b"1"), [b"q"]),
    (b"ackjob", "jobs", (b"D-1", b"D-2"), [b"D-1", b"D-2"]),
    (b"nack", "jobs", (b"delay-ms", b"100", b"D-1"), [b"D-1"]),
    (b"nack", "jobs", (b"D-1", b"D-2"), [b"D-1", b"D-2"]),
    (b"nack", "jobs", (b"ERROR", b"boom", b"delay-ms", b"1", b"D-1"), [b"D-1"]),
    (b"working", "jobs", (b"D-1", b"PROGRESS", b"5"), [b"D-1"]),
    (b"jobset", "jobs", (b"D-1", b"PRIORITY", b"1"), [b"D-1"]),
])
def test_declared_queues_and_jobs_are_found_in_the_arguments(
        name: bytes, kind: str, args: tuple[bytes, ...], expected: list[bytes]) -> None:
    assert _where(name, kind, *args) == expected


# The client's keyword for an option, where it is not the option's field, and the
# options a method handles itself (a scan's cursor and BUSYLOOP, JSCAN's REPLY).
RENAMED = {"repl": "replicate", "timeout": "timeout_ms"}
# option table -> the methods that take its options, and the fields they handle
# themselves (not keywords)
METHODS = [
    (spec.ADDJOB, ("add_job",), set()),
    # add_jobs: one DEDUP key per body, `dedup`; ADDJOBS takes no UNIQUE key
    (spec.ADDJOB, ("add_jobs",), {"dedup", "unique"}),
    (spec.GETJOB, ("get_jobs",), set()),
    (spec.NACK, ("nack",), set()),
    (spec.WORKING, ("working",), set()),
    (spec.ACKJOB, ("ack",), set()),
    (spec.WAITJOB, ("wait",), set()),
    (spec.JOBSET, ("set_job",), set()),
    (spec.CRON_ADD, ("cron_add",), set()),
    (spec.BATCH_NEW, ("batch_new",), set()),
    (spec.TOPIC_PUBLISH, ("topic_publish",), set()),
    (spec.BATCH_LIST, ("batch_list",), set()),
    (spec.QPOLICY_SET, ("qpolicy_set",), set()),
    (spec.DEADLETTER_REQUEUE, ("requeue_dead",), set()),
    (spec.REPLAY, ("replay",), set()),
    (spec.RETAINED, ("retained",), set()),
    (spec.QSCAN, ("qscan",), {"cursor", "busyloop"}),
    (spec.JSCAN, ("jscan", "jscan_info"), {"cursor", "busyloop", "reply"}),
]


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
@pytest.mark.parametrize(("table", "methods", "internal"), METHODS,
                         ids=[f"{t.name}-{m[0]}" for t, m, _ in METHODS])
def test_the_client_takes_every_option_the_server_parses(
        client_class: type, table: spec.CommandOptions, methods: tuple[str, ...],
        internal: set[str]) -> None:
    for method in methods:
        params = inspect.signature(getattr(client_class, method)).parameters
        for option in table.options:
            if option.field in internal:
                continue
            keyword = RENAMED.get(option.field, option.field)
            if option.repeat:
                keyword = option.field  # (JSCAN's STATE: `states`)
            assert keyword in params, f"{client_class.__name__}.{method} lacks {keyword!r}"


def test_every_option_table_a_command_declares_is_in_the_client_check() -> None:
    """A command given a new option table must have its client method listed above."""
    declared = {table.name for command in load_commands().values() for table in command.options}
    checked = {table.name for table, _, _ in METHODS} | {"PAUSE"}  # PAUSE: *flags words
    assert declared <= checked
