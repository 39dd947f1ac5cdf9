"""Who an HTTP request is: the Authorization header read once for the HTTP port
(app.py, which checks the node's users) and the metrics endpoint (server/metrics.py,
`http_user`: `requirepass`, the `default` user's password, as `Authorization: Bearer
<password>` or basic auth with any user name). Without aiohttp: the metrics endpoint
imports it without the HTTP port.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any

# The challenge of a 401: either scheme is accepted.
CHALLENGE = 'Bearer realm="disq", Basic realm="disq"'


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


def http_user(config: Any, header: str) -> str | None:
    """The user a request with this Authorization header ("" if none) acts as, or
    None when it is not let in: `default` without requirepass, or with its password."""
    secret = config.requirepass
    if not secret:
        return "default"
    given = credentials(header)
    if given is None or not hmac.compare_digest(given[1], secret.encode()):
        return None
    return "default"
