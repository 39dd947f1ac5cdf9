"""What a web page may make the operator's browser send to the HTTP port, refused.

- DNS rebinding: a page at attacker.example whose name the attacker then points at
  127.0.0.1 is, for the browser, the same origin as that node: it could read the jobs.
  The browser still sends `Host: attacker.example`, so a request is answered only when
  its Host is one of the node's names (421 otherwise): an IP address (one cannot be
  rebound: a page at http://10.0.0.1/ is that address's own), `localhost`, the
  machine's host name, a name in `bind` or `http-bind` (or `metrics-bind` on the
  metrics port: metricsport.py has the same guards), or one listed in
  `http-allowed-hosts` (`*`: any). A request without Host (HTTP/1.0) is not a
  browser's: it is answered.
- Cross-site requests: any page can make the browser send a form's POST (or a
  fetch() a browser sends without asking first: text/plain, no custom header) with
  the operator's basic-auth credentials. The API and /metrics refuse (403) a request
  the browser marks as another site's (`Sec-Fetch-Site: cross-site` or `same-site`),
  or whose `Origin` (else `Referer`) is not the node's own (scheme://Host) nor in
  `http-allowed-origins`: Go's CrossOriginProtection rule. And a request that would
  change something (POST, PUT, PATCH, DELETE) with a body must say it is JSON
  (`Content-Type: application/json`; else 415), which a page can send elsewhere only
  after a CORS preflight the node never grants.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import cache
from urllib.parse import urlsplit

from aiohttp import web

from ...config import Config
from .problems import Problem

CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OWN_SITE = frozenset({"same-origin", "none"})  # Sec-Fetch-Site of the node's own pages


@cache
def _machine_names() -> frozenset[str]:
    return frozenset({"localhost", socket.gethostname().lower().rstrip(".")})


def _host_name(host: str) -> str:
    """The name of a Host header, without its port: `[::1]:80` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() and ":" not in name else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_refusal(request: web.Request, config: Config,
                 port_names: tuple[str, ...] = ()) -> Problem | None:
    """421 for a Host that is not one of the node's names (`port_names`: those the
    port listens on, besides bind's and http-bind's)."""
    host = request.headers.get("Host")
    if host is None:
        return None
    name = _host_name(host).rstrip(".")
    if _is_address(name) or name in _machine_names():
        return None
    allowed = [_host_name(entry).rstrip(".") for entry in config.http_allowed_hosts.split()]
    if "*" in allowed or name in allowed:
        return None
    if name in (n.lower() for n in [*config.bind, *config.http_bind.split(), *port_names]):
        return None
    return Problem(421, f"Host '{host}' is not a name of this node (a page on another site "
                        "may have had its name point here: DNS rebinding); use its "
                        "address, or list the name in http-allowed-hosts", "MISDIRECTED")


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme else url.lower()


def origin_refusal(request: web.Request, config: Config) -> Problem | None:
    """403 for a request another site's page made the browser send."""
    headers = request.headers
    origin = headers.get("Origin")
    if origin is None and "Referer" in headers:
        origin = _origin_of(headers["Referer"])
    allowed = [entry.rstrip("/") for entry in config.http_allowed_origins.lower().split()]
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None:  # the browser says whose page it is, pages cannot forge it
        if fetch_site.lower() in OWN_SITE or (origin is not None
                                              and origin.lower() in allowed):
            return None
    elif origin is None:
        return None  # not a browser (curl, a client library), or one too old to say
    elif origin.lower() in (f"{request.scheme}://{request.host}".lower(), *allowed):
        return None
    shown = origin if origin is not None else f"Sec-Fetch-Site: {fetch_site}"
    return Problem(403, f"a cross-site request ({shown}) is refused: only the node's own "
                        "pages may call the API from a browser; list other origins in "
                        "http-allowed-origins", "CROSSORIGIN")


def content_type_refusal(request: web.Request) -> Problem | None:
    """415 for a request that changes something with a body that is not JSON."""
    if request.method not in CHANGING_METHODS or not request.body_exists:
        return None
    if request.content_type == "application/json":
        return None
    given = request.headers.get("Content-Type", "none")
    return Problem(415, f"the request body must be JSON, sent as Content-Type: "
                        f"application/json (not {given})", "NOTJSON")
