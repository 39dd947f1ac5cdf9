"""GETJOB ... WHERE: parsing the filters, matching a job's attributes, and the
consumers' filtered take (the rest left queued, in order)."""

from __future__ import annotations

import pytest

from disq import errors
from disq.config import Config
from disq.ids import new_node_id
from disq.job import Job
from disq.node import Node
from disq.requests import AddJob, GetJob
from disq.where import WHERE_SCAN_MAX, job_matches, to_number


def getjob(*args: bytes) -> GetJob:
    return GetJob.parse([b"GETJOB", *args])


def conditions(*args: bytes) -> GetJob:
    return getjob(*args, b"FROM", b"q")


def with_attrs(node: Node, *pairs: bytes) -> Job:
    args = [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"1"]
    for i in range(0, len(pairs), 2):
        args += [b"ATTR", pairs[i], pairs[i + 1]]
    return node.admission.add_job(AddJob.parse(args))


def test_a_plain_getjob_has_no_filter() -> None:
    request = getjob(b"COUNT", b"2", b"FROM", b"q")
    assert request.where is None and not request.nohang


def test_wheres_anywhere_before_from() -> None:
    request = getjob(b"WHERE", b"k", b"=", b"v", b"COUNT", b"3", b"where", b"n", b"EXISTS",
                     b"WHERE", b"size", b">", b"2.5", b"FROM", b"q", b"r")
    assert request.where is not None and len(request.where) == 3
    assert request.count == 3 and request.queues == [b"q", b"r"]
    assert not request.nohang  # it blocks as a plain GETJOB does


@pytest.mark.parametrize("args", [
    [b"WHERE"], [b"WHERE", b"k"], [b"WHERE", b"k", b"="], [b"WHERE", b"k", b"~", b"v"],
    [b"WHERE", b"", b"=", b"v"], [b"WHERE", b"k" * 65, b"EXISTS"],
    [w for i in range(17) for w in (b"WHERE", b"k%d" % i, b"EXISTS")],
])
def test_a_filter_that_does_not_parse_is_refused(args: list[bytes]) -> None:
    with pytest.raises(errors.DisqError, match="WHERE needs key = value|syntax"):
        conditions(*args)


@pytest.mark.parametrize("number", [b"ten", b"", b"nan", b"inf", b" 1", b"1_0"])
def test_less_and_greater_need_a_number(number: bytes) -> None:
    with pytest.raises(errors.DisqError, match="need a number"):
        conditions(b"WHERE", b"k", b"<", number)


@pytest.mark.parametrize(("attrs", "where", "expected"), [
    ((b"k", b"v"), (b"k", b"=", b"v"), True),
    ((b"k", b"v"), (b"k", b"=", b"w"), False),
    ((b"k", b"v"), (b"k", b"!=", b"w"), True),
    ((b"k", b"v"), (b"k", b"!=", b"v"), False),
    ((b"other", b"v"), (b"k", b"!=", b"w"), False),  # no key: no match, even !=
    ((b"k", b"tenant-a"), (b"k", b"PREFIX", b"tenant-"), True),
    ((b"k", b"other"), (b"k", b"prefix", b"tenant-"), False),
    ((b"k", b"10"), (b"k", b">", b"9"), True),  # as numbers: "10" > "9"
    ((b"k", b"10"), (b"k", b"<", b"9"), False),
    ((b"k", b"-2.5"), (b"k", b"<", b"0"), True),
    ((b"k", b"big"), (b"k", b">", b"0"), False),  # no number: no match
    ((b"k", b"big"), (b"k", b"<", b"0"), False),
    ((b"k", b""), (b"k", b"EXISTS"), True),
    ((b"j", b""), (b"k", b"exists"), False),
])
def test_matching(attrs: tuple[bytes, bytes], where: tuple[bytes, ...], expected: bool) -> None:
    node = Node(Config(), new_node_id())
    request = conditions(b"WHERE", *where)
    assert request.where is not None
    assert job_matches(with_attrs(node, *attrs), request.where) is expected


def test_a_job_without_attrs_matches_nothing() -> None:
    node = Node(Config(), new_node_id())
    plain = node.admission.add_job(AddJob.parse([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE",
                                                 b"1"]))
    request = conditions(b"WHERE", b"k", b"EXISTS")
    assert request.where is not None and not job_matches(plain, request.where)


def test_several_wheres_are_anded_and_the_rest_stay_queued_in_order() -> None:
    node = Node(Config(), new_node_id())
    a = with_attrs(node, b"t", b"x", b"n", b"1")
    b = with_attrs(node, b"t", b"y", b"n", b"5")
    c = with_attrs(node, b"t", b"y", b"n", b"7")
    d = with_attrs(node, b"t", b"y", b"n", b"2")
    where = conditions(b"WHERE", b"t", b"=", b"y", b"WHERE", b"n", b">", b"3").where
    assert node.consumers.get_jobs([b"q"], 10, False, where) == [b, c]
    assert node.consumers.get_jobs([b"q"], 10, False, where) == []
    assert node.consumers.get_jobs([b"q"], 10, False) == [a, d]


def test_the_scan_stops_after_its_bound() -> None:
    node = Node(Config(), new_node_id())
    for _ in range(WHERE_SCAN_MAX):
        with_attrs(node, b"k", b"no")
    late = with_attrs(node, b"k", b"yes")
    where = conditions(b"WHERE", b"k", b"=", b"yes").where
    assert node.consumers.get_jobs([b"q"], 1, False, where) == []
    assert len(node.consumers.get_jobs([b"q"], 1, False)) == 1  # one fewer before it
    assert node.consumers.get_jobs([b"q"], 1, False, where) == [late]


def test_numbers() -> None:
    assert [to_number(x) for x in (b"1", b"-2.5", b"1e3", b"x", b"")] == [1, -2.5, 1000,
                                                                          None, None]
