"""Typed requests of how jobs end and what their consumers report (disq extensions):
ACKJOB with a RESULT, WAITJOB, and WORKING with a PROGRESS or DATA, parsed as
requests.py parses the other job commands (the same option tables, disq_client.spec,
and number rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from disq_client.spec import (
    ACKJOB,
    BATCH_LIST,
    BATCH_NEW,
    MAX_WAITED,
    WAITJOB,
    WORKING,
    CommandOptions,
)

from . import errors
from .batches import DEFAULT_TTL_S, MAX_BID_LEN, Callback
from .options import (
    OptionParser,
    compile_options,
    options_before_ids,
    parse_options,
    parsers_by_field,
    set_fields,
    validate_ids,
)


class Ack:
    """ACKJOB id [id ...], or ACKJOB id RESULT blob: one job acknowledged with its
    result. No job ID can be RESULT, so the two do not mix up."""

    __slots__ = ("ids", "result")
    OPTIONS: ClassVar[CommandOptions] = ACKJOB

    def __init__(self, ids: list[bytes], result: bytes | None = None) -> None:
        self.ids = ids
        self.result = result

    @staticmethod
    def has_result(args: list[bytes]) -> bool:
        """Whether `args` (the whole ACKJOB) is the RESULT form: one cheap test for
        the plain ACKJOB of every consumer."""
        return len(args) == 4 and len(args[2]) == 6 and args[2].upper() == b"RESULT"

    @classmethod
    def parse(cls, args: list[bytes]) -> Ack:
        if cls.has_result(args):
            return cls(validate_ids(args[1:2]), args[3])
        return cls(validate_ids(args[1:]))


class WaitJob:
    """WAITJOB [TIMEOUT ms] [ANY] id [id ...]: until every job (ANY: one) ended, or the
    timeout (0: none)."""

    __slots__ = ("ids", "timeout", "any")
    OPTIONS: ClassVar[CommandOptions] = WAITJOB
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(WAITJOB)

    def __init__(self, ids: list[bytes], timeout: int = 0, any: bool = False) -> None:
        self.ids = ids
        self.timeout = timeout  # ms; 0: none
        self.any = any

    @classmethod
    def parse(cls, args: list[bytes]) -> WaitJob:
        request = cls([])
        request.ids = cls.checked_ids(args[options_before_ids(request, cls._PARSERS, args):])
        return request

    @staticmethod
    def checked_ids(ids: list[bytes]) -> list[bytes]:
        if not ids:
            raise errors.err("WAITJOB needs at least one job ID")
        if len(ids) > MAX_WAITED:
            raise errors.err(f"WAITJOB takes at most {MAX_WAITED} job IDs")
        return validate_ids(ids)


class Working:
    """WORKING id [PROGRESS 0-100] [DATA blob]: PROGRESS and DATA (disq extensions) are
    kept with the job on its holders until the next report. The plain WORKING id of
    every consumer does not come here (commands/jobs.py)."""

    __slots__ = ("job_id", "progress", "data")
    OPTIONS: ClassVar[CommandOptions] = WORKING
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(WORKING)
    _FIELDS: ClassVar[dict[str, OptionParser]] = parsers_by_field(_PARSERS)

    def __init__(self, job_id: bytes, progress: int | None = None,
                 data: bytes | None = None) -> None:
        self.job_id = job_id
        self.progress = progress
        self.data = data

    @classmethod
    def parse(cls, args: list[bytes]) -> Working:
        request = cls(args[1])
        parse_options(request, cls._PARSERS, args, 2)
        return request

    @classmethod
    def from_fields(cls, job_id: bytes, values: Mapping[str, object]) -> Working:
        """From typed options (the HTTP API's JSON), checked as `parse` checks them."""
        request = cls(job_id)
        set_fields(request, cls._FIELDS, values)
        return request


class BatchNew:
    """BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s]: a batch, open,
    on every node; its callbacks are added once every member ended (ONSUCCESS only if
    none went dead). The batch is forgotten TTL seconds after it was made."""

    __slots__ = ("bid", "ondone", "onsuccess", "ttl")
    OPTIONS: ClassVar[CommandOptions] = BATCH_NEW
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(BATCH_NEW)
    _FIELDS: ClassVar[dict[str, OptionParser]] = parsers_by_field(_PARSERS)

    def __init__(self, bid: bytes, ondone: Callback | None = None,
                 onsuccess: Callback | None = None, ttl: int = DEFAULT_TTL_S) -> None:
        self.bid = check_bid(bid)
        self.ondone = ondone
        self.onsuccess = onsuccess
        self.ttl = ttl  # s

    @classmethod
    def parse(cls, args: list[bytes]) -> BatchNew:
        """From BATCH NEW bid [options] (args[0] BATCH, args[1] NEW)."""
        request = cls(args[2])
        parse_options(request, cls._PARSERS, args, 3)
        return request

    @classmethod
    def from_fields(cls, bid: bytes, values: Mapping[str, object]) -> BatchNew:
        """From typed options (the HTTP API's JSON), checked as `parse` checks them."""
        request = cls(bid)
        set_fields(request, cls._FIELDS, values)
        return request


class BatchList:
    """BATCH LIST [STATE open|closed|done]: the batches this node knows (in that state)."""

    __slots__ = ("state",)
    OPTIONS: ClassVar[CommandOptions] = BATCH_LIST
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(BATCH_LIST)
    _FIELDS: ClassVar[dict[str, OptionParser]] = parsers_by_field(_PARSERS)

    def __init__(self, state: str | None = None) -> None:
        self.state = state  # open, closed, done; None: any

    @classmethod
    def parse(cls, args: list[bytes]) -> BatchList:
        """From BATCH LIST [options] (args[0] BATCH, args[1] LIST)."""
        request = cls()
        parse_options(request, cls._PARSERS, args, 2)
        return request

    @classmethod
    def from_fields(cls, values: Mapping[str, object]) -> BatchList:
        """From typed options (the HTTP API's query), checked as `parse` checks them."""
        request = cls()
        set_fields(request, cls._FIELDS, values)
        return request


def check_bid(bid: bytes) -> bytes:
    """A batch ID as given by a client: 1 to MAX_BID_LEN bytes."""
    if not 0 < len(bid) <= MAX_BID_LEN:
        raise errors.err(f"a batch ID must be 1 to {MAX_BID_LEN} bytes")
    return bid
