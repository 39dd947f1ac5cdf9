"""Errors the core raises; the protocol layer turns each into a RESP error reply."""

from __future__ import annotations


class DisqError(Exception):
    """`code` is the RESP error prefix (ERR, NOREPL, ...), `message` the rest."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message

    def reply(self) -> bytes:
        # A message may quote what the client sent: CR/LF would end the line early
        # and desynchronize the client, so they become spaces (as in Redis).
        text = self.message.encode(errors="replace")
        if b"\r" in text or b"\n" in text:
            text = text.replace(b"\r", b" ").replace(b"\n", b" ")
        return b"-%s %s\r\n" % (self.code.encode(), text)


def err(message: str) -> DisqError:
    return DisqError("ERR", message)


SYNTAX = err("syntax error")
NOT_INTEGER = err("value is not an integer or out of range")
BADID = DisqError("BADID", "Invalid Job ID format.")
NOJOB = DisqError("NOJOB", "Job not known in the context of this node.")
TOOLATE = DisqError(
    "TOOLATE",
    "Half of job TTL already elapsed, you are no longer allowed to postpone the next delivery.",
)
NOREPL = DisqError("NOREPL", "Not enough reachable nodes for the requested replication level")
NOREPL_TIMEOUT = DisqError(
    "NOREPL", "Timeout reached before replicating to the requested number of nodes"
)
NOREPL_EXPIRED = DisqError(
    "NOREPL", "job removed (expired?) before the requested replication level was achieved"
)
NOREPL_LEAVING = DisqError(
    "NOREPL", "Not enough reachable nodes for the requested replication level, since I'm "
    "unable to hold a copy of the message for the following reason: I'm leaving the "
    "cluster")
NOREPL_OOM = DisqError(
    "NOREPL", "Not enough reachable nodes for the requested replication level, since I'm "
    "unable to hold a copy of the message for the following reason: I'm out of memory")
MAXLEN = DisqError("MAXLEN", "Queue is already longer than the specified MAXLEN count")
PAUSED = DisqError("PAUSED", "Queue paused in input, try later")
LEAVING = DisqError(
    "LEAVING", "This node is leaving the cluster, please connect to a different one"
)
OOM = DisqError("OOM", "command not allowed when used memory > 'maxmemory'.")
