"""Errors as RFC 9457 problem details (`application/problem+json`), the RESP error
code in `code`: a client of the HTTP API sees the same error a RESP client gets,
with an HTTP status that says what kind it is."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

PROBLEM_TYPE = "application/problem+json"

# The RESP error codes and their HTTP statuses; any other code: 400.
STATUS_BY_CODE = {
    "NOJOB": 404,
    "NOAUTH": 401,
    "WRONGPASS": 401,
    "NOPERM": 403,
    "BUSY": 429,
    "NOREPL": 503,
    "LEAVING": 503,
    "LOADING": 503,
    "MISCONF": 503,
    "OOM": 507,
    "PAUSED": 409,
    "MAXLEN": 409,
    "TOOLATE": 409,
    "NOTIMPLEMENTED": 501,
    "NOBATCH": 404,
    "NOTOPIC": 404,
    "BATCHCLOSED": 409,
    "BATCHEXISTS": 409,
    "BATCHFULL": 507,
    "NOMAJORITY": 503,
}
TITLES = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    408: "Request Timeout", 409: "Conflict", 413: "Content Too Large",
    415: "Unsupported Media Type", 421: "Misdirected Request", 429: "Too Many Requests", 500: "Internal Server Error", 501: "Not Implemented",
    503: "Service Unavailable", 507: "Insufficient Storage",
}


class Problem(Exception):
    """Raised by a route: answered as problem+json."""

    def __init__(self, status: int, detail: str, code: str = "ERR",
                 **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code
        self.extra = extra

    @classmethod
    def from_resp(cls, code: str, message: str) -> Problem:
        """A RESP error reply: its HTTP status by its code; an internal error: 500."""
        status = STATUS_BY_CODE.get(code, 400)
        if code == "ERR" and message.startswith("internal error"):
            status = 500
        return cls(status, message, code)

    def body(self) -> str:
        return json.dumps({"type": f"urn:disq:error:{self.code.lower()}",
                           "title": TITLES.get(self.status, "Error"), "status": self.status,
                           "detail": self.detail, "code": self.code, **self.extra})

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        return web.Response(status=self.status, text=self.body(),
                            content_type=PROBLEM_TYPE, headers=headers)

    def message(self) -> bytes:
        """The whole HTTP/1.1 answer, for a connection answered without aiohttp (one
        refused as it comes: connections.py), which is then closed."""
        body = self.body().encode()
        return (f"HTTP/1.1 {self.status} {TITLES.get(self.status, 'Error')}\r\n"
                f"Content-Type: {PROBLEM_TYPE}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body


def bad_request(detail: str) -> Problem:
    return Problem(400, detail)
