"""Who an HTTP request is: the one check the HTTP port (app.py) and the metrics
endpoint (server/metrics.py) share. `requirepass` is the `default` user's password,
given as `Authorization: Bearer <password>` or basic auth (any user name, the
password). Without aiohttp: the metrics endpoint imports it without the HTTP port.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any

# The challenge of a 401: either scheme is accepted.
CHALLENGE = 'Bearer realm="disq", Basic realm="disq"'


def _password(header: str) -> str | None:
    """The password an Authorization header carries (None: none, or malformed)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
    return None


def http_user(config: Any, header: str) -> str | None:
    """The user a request with this Authorization header ("" if none) acts as, or
    None when it is not let in: `default` without requirepass, or with its password."""
    secret = config.requirepass
    if not secret:
        return "default"
    given = _password(header)
    if given is None or not hmac.compare_digest(given.encode(), secret.encode()):
        return None
    return "default"
