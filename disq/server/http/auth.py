"""Who an HTTP request is, for the HTTP port (app.py) and the metrics port
(metricsport.py): the Authorization header read once, checked against the node's
users (disq/acl.py), failures counted and throttled per IP (auth_throttle.py, the
node's one table, which AUTH counts in too). Without aiohttp.

Basic auth `user:password`; a name no user has means the `default` user while it has
a password (requirepass's, as before users existed: any name was accepted); `Bearer
<password>` is the default user. Runs on the event loop (the users live there).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING

from ..auth_throttle import AuthThrottle

if TYPE_CHECKING:
    from ...acl import AclTable, User

# The challenge of a 401: either scheme is accepted.
CHALLENGE = 'Bearer realm="disq", Basic realm="disq"'


class AuthRefused(Exception):
    """A request not let in: (HTTP status, message, RESP error code)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def credentials(header: str) -> tuple[str, bytes] | None:
    """(user name, password) of an Authorization header ("" for Bearer: the default
    user), or None if there is none (or it is not readable)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return "", value.strip().encode()
    if scheme.lower() == "basic":
        try:
            raw = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        name, _, password = raw.partition(b":")
        return name.decode("latin-1"), password
    return None


class Authenticator:
    """The user each request acts as; one per listening endpoint. `throttle`: the
    node's failures per IP (its own table without one)."""

    def __init__(self, acl: AclTable, throttle: AuthThrottle | None = None) -> None:
        self.acl = acl
        self.throttle = throttle if throttle is not None else AuthThrottle()

    def user(self, header: str, ip: str, anonymous: bool = True) -> User:
        """The user of a request with this Authorization header ("" if none) from `ip`.
        `anonymous`: without credentials it is the default user when the node asks
        for none (False: credentials of a user with a password are always needed).
        Raises AuthRefused: 401 (none, or wrong), 429 (the IP paused)."""
        acl = self.acl
        given = credentials(header)
        if given is None:
            if anonymous and not acl.auth_required:
                return acl.default
            raise AuthRefused(401, "Authentication required: basic auth user:password, or "
                                   "Authorization: Bearer <requirepass>", "NOAUTH")
        name, password = given
        now = time.monotonic()
        if self.throttle.paused(ip, now):
            acl.denied_auth_throttled += 1
            raise AuthRefused(429, "too many failed authentications: wait a second", "BUSY")
        user = acl.get(name)
        if user is None and (not name or not acl.default.nopass):
            # Bearer, or a name no user has while the default user has a password
            user = acl.default
        if (user is not None and user.check_password(password)
                and (anonymous or not user.nopass)):
            return user
        acl.denied_auth += 1
        self.throttle.failed(ip, now)
        raise AuthRefused(401, "invalid username-password pair or user is disabled.",
                          "WRONGPASS")


def command_refusal(acl: AclTable, user: User, command: str) -> str | None:
    """None if `user` may run `command` (for a route that reads the node without a
    command: /metrics is INFO), else the NOPERM message (counted)."""
    if not user.restricted or user.may_run(command):
        return None
    acl.denied_cmd += 1
    return f"User {user.name} has no permissions to run the '{command}' command"
