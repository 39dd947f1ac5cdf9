"""Errors the core raises; the protocol layer turns each into a RESP error reply.

The fixed replies (`NOREPL`, `BADID`, ...) are classes, raised as `raise errors.NOREPL`:
each raise makes a fresh instance that dies with its except block. A shared instance
would not: every raise adds its frames to the instance's `__traceback__`, so the
arguments of every refused command (a 100 KB body, a 50 MB bogus ID) would stay in
memory for the life of the process."""

from __future__ import annotations


class DisqError(Exception):
    """`code` is the RESP error prefix (ERR, NOREPL, ...), `message` the rest."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message

    def reply(self) -> bytes:
        return _encode(self.code, self.message)


class FixedError(DisqError):
    """An error whose reply never changes: its bytes are built once, with the class."""

    __slots__ = ()
    CODE = "ERR"
    MESSAGE = ""
    REPLY = b""

    def __init__(self) -> None:
        super().__init__(self.CODE, self.MESSAGE)

    def reply(self) -> bytes:
        return self.REPLY


def _encode(code: str, message: str) -> bytes:
    # A message may quote what the client sent: CR/LF would end the line early
    # and desynchronize the client, so they become spaces (as in Redis).
    text = message.encode(errors="replace")
    if b"\r" in text or b"\n" in text:
        text = text.replace(b"\r", b" ").replace(b"\n", b" ")
    return b"-%s %s\r\n" % (code.encode(), text)


def err(message: str) -> DisqError:
    return DisqError("ERR", message)


def body_too_big(length: int, limit: int) -> DisqError:
    """A job body over job-max-body (ADDJOB, ADDJOBS, HTTP, CRON ADD)."""
    return err(f"job body of {length} bytes is over job-max-body ({limit} bytes)")


def fixed(name: str, code: str, message: str) -> type[FixedError]:
    """A FixedError class for one reply (`raise` it: a fresh instance each time)."""
    return type(name, (FixedError,), {
        "__slots__": (), "CODE": code, "MESSAGE": message, "REPLY": _encode(code, message)})


SYNTAX = fixed("SYNTAX", "ERR", "syntax error")
NOT_INTEGER = fixed("NOT_INTEGER", "ERR", "value is not an integer or out of range")
BADID = fixed("BADID", "BADID", "Invalid Job ID format.")
NOJOB = fixed("NOJOB", "NOJOB", "Job not known in the context of this node.")
TOOLATE = fixed(
    "TOOLATE", "TOOLATE",
    "Half of job TTL already elapsed, you are no longer allowed to postpone the next delivery.",
)
NOREPL = fixed(
    "NOREPL", "NOREPL", "Not enough reachable nodes for the requested replication level")
NOREPL_TIMEOUT = fixed(
    "NOREPL_TIMEOUT", "NOREPL",
    "Timeout reached before replicating to the requested number of nodes")
NOREPL_EXPIRED = fixed(
    "NOREPL_EXPIRED", "NOREPL",
    "job removed (expired?) before the requested replication level was achieved")
NOREPL_LEAVING = fixed(
    "NOREPL_LEAVING", "NOREPL",
    "Not enough reachable nodes for the requested replication level, since I'm "
    "unable to hold a copy of the message for the following reason: I'm leaving the "
    "cluster")
NOREPL_OOM = fixed(
    "NOREPL_OOM", "NOREPL",
    "Not enough reachable nodes for the requested replication level, since I'm "
    "unable to hold a copy of the message for the following reason: I'm out of memory")
MAXLEN = fixed("MAXLEN", "MAXLEN", "Queue is already longer than the specified MAXLEN count")
PAUSED = fixed("PAUSED", "PAUSED", "Queue paused in input, try later")
NOMAJORITY = fixed(
    "NOMAJORITY", "NOMAJORITY",
    "This node does not reach a majority of the cluster: a STRICT order key waits")
LEAVING = fixed(
    "LEAVING", "LEAVING",
    "This node is leaving the cluster, please connect to a different one")
OOM = fixed("OOM", "OOM", "command not allowed when used memory > 'maxmemory'.")
LOADING = fixed("LOADING", "LOADING", "Disque is loading the dataset in memory")
# JOBSET (a disq extension)
JOB_ACKED = fixed("JOB_ACKED", "ERR",
                  "The job is already acknowledged: JOBSET can not change it")
JOB_WAIT_REPL = fixed(
    "JOB_WAIT_REPL", "ERR",
    "The job is still being replicated (its ADDJOB did not return yet): try JOBSET later")
NOREPL_JOBSET = fixed(
    "NOREPL_JOBSET", "NOREPL",
    "Not every node holding the job applied the change in time: those not reached "
    "keep the old fields and may still deliver the job at its old time; try again")
JOB_DUE_BEYOND_TTL = fixed(
    "JOB_DUE_BEYOND_TTL", "ERR",
    "The specified AT / DELAY-MS is beyond the job's TTL. Job not changed since it would "
    "never be delivered")
