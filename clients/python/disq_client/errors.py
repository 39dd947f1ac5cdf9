"""Exceptions: one class per Disque error code, plus connection and timeout errors.

A server error reply `-CODE message` becomes an instance of the class registered for
CODE (`NoReplicationError` for NOREPL, ...), or `ResponseError` for codes without one.
"""

from __future__ import annotations


class DisqError(Exception):
    """Base class of everything this package raises."""


class DisqConnectionError(DisqError, ConnectionError):
    """No node could be reached, or a connection broke in the middle of a command."""


class DisqTimeoutError(DisqError, TimeoutError):
    """A node did not answer within the client's timeout."""


class ProtocolError(DisqError):
    """The node sent bytes that are not RESP."""


class ResponseError(DisqError):
    """An error reply from the server. `code` is its first word (ERR, NOREPL, ...)."""

    code_name = "ERR"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.code_name
        self.message = message


class NoReplicationError(ResponseError):
    """-NOREPL: not enough reachable nodes, or the ADDJOB timeout passed before the job
    reached its replication level."""

    code_name = "NOREPL"


class QueueFullError(ResponseError):
    """-MAXLEN: the queue is already at least MAXLEN jobs long on this node."""

    code_name = "MAXLEN"


class PausedError(ResponseError):
    """-PAUSED: the queue is paused for input."""

    code_name = "PAUSED"


class BadJobIdError(ResponseError):
    """-BADID: a job ID is not in Disque's format."""

    code_name = "BADID"


class NoJobError(ResponseError):
    """-NOJOB: the node does not know the job (WORKING)."""

    code_name = "NOJOB"


class TooLateError(ResponseError):
    """-TOOLATE: half of the job's TTL has passed, WORKING cannot postpone it any more."""

    code_name = "TOOLATE"


class LeavingError(ResponseError):
    """-LEAVING: the node is leaving the cluster; the client moves to another node."""

    code_name = "LEAVING"


class OutOfMemoryError(ResponseError):
    """-OOM: the node is above maxmemory."""

    code_name = "OOM"


class LoadingError(ResponseError):
    """-LOADING: the node is still loading its AOF."""

    code_name = "LOADING"


class AuthenticationError(ResponseError):
    """-NOAUTH, or a wrong password given to AUTH."""

    code_name = "NOAUTH"


class BatchError(DisqError):
    """Some commands of a pipelined batch failed. `results` has, in order, each
    command's result or the exception it got."""

    def __init__(self, results: list[object]) -> None:
        errors = [r for r in results if isinstance(r, Exception)]
        super().__init__(f"{len(errors)} of {len(results)} commands failed, "
                         f"first: {errors[0]!r}" if errors else "no error")
        self.results = results
        self.errors = errors


_BY_CODE: dict[str, type[ResponseError]] = {
    cls.code_name: cls
    for cls in (NoReplicationError, QueueFullError, PausedError, BadJobIdError, NoJobError,
                TooLateError, LeavingError, OutOfMemoryError, LoadingError,
                AuthenticationError)
}
_BY_CODE["WRONGPASS"] = AuthenticationError


def from_reply(text: str) -> ResponseError:
    """The exception for an error reply (the text after the leading '-')."""
    code, _, _rest = text.partition(" ")
    cls = _BY_CODE.get(code)
    if cls is None:
        if text == "ERR invalid password":
            return AuthenticationError(text, code)
        cls = ResponseError
    return cls(text, code)
