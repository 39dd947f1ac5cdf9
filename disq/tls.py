"""TLS for client connections and the cluster bus, with Redis 6's directives.

    tls-port 7712                  clients over TLS here (0: none); `port 0` leaves
                                   TLS as the only way in
    tls-cert-file / tls-key-file   this node's certificate and key (PEM), used on the
                                   client port and, both ways, on the bus
    tls-ca-cert-file / -dir        the CAs client and peer certificates must chain to
    tls-auth-clients yes|no|optional   client certificates: required (default, as
                                   Redis), not asked, or checked when given
    tls-cluster yes                the bus (still the node's port + 10000) speaks TLS
                                   only, mutual: a peer without a certificate of
                                   these CAs can neither connect nor be connected to
    tls-protocols "TLSv1.2 TLSv1.3"   the versions allowed (default: 1.2 and up)

Peers are reached by IP, so on the bus a certificate is checked against the CAs, not
against a host name (as Redis Cluster does). cluster-secret still applies inside TLS.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from .config import ConfigError

HANDSHAKE_TIMEOUT = 10.0  # s: a connection that does not finish its handshake is closed

_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


def enabled(config: Any) -> bool:
    """Is TLS used anywhere (a TLS client port or a TLS bus)?"""
    return bool(config.tls_port or config.tls_cluster)


def _readable(path: str, what: str) -> None:
    if not path:
        raise ConfigError(f"TLS: {what} is not set")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigError(f"TLS: can't read {what} '{path}'")


def _context(config: Any, side: ssl.Purpose) -> ssl.SSLContext:
    _readable(config.tls_cert_file, "tls-cert-file")
    _readable(config.tls_key_file, "tls-key-file")
    if not (config.tls_ca_cert_file or config.tls_ca_cert_dir):
        raise ConfigError("TLS: tls-ca-cert-file or tls-ca-cert-dir must be set")
    if config.tls_ca_cert_file:
        _readable(config.tls_ca_cert_file, "tls-ca-cert-file")
    if config.tls_ca_cert_dir and not os.path.isdir(config.tls_ca_cert_dir):
        raise ConfigError(f"TLS: tls-ca-cert-dir '{config.tls_ca_cert_dir}' is not a "
                          "directory")
    protocol = (ssl.PROTOCOL_TLS_SERVER if side is ssl.Purpose.CLIENT_AUTH
                else ssl.PROTOCOL_TLS_CLIENT)
    ctx = ssl.SSLContext(protocol)
    low, high = parse_protocols(config.tls_protocols)
    ctx.minimum_version, ctx.maximum_version = low, high
    try:
        ctx.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: can't load the certificate '{config.tls_cert_file}' "
                          f"with the key '{config.tls_key_file}': {exc}") from None
    try:
        ctx.load_verify_locations(cafile=config.tls_ca_cert_file or None,
                                  capath=config.tls_ca_cert_dir or None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: can't load the CA certificates: {exc}") from None
    return ctx


def parse_protocols(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """`tls-protocols "TLSv1.2 TLSv1.3"` -> (lowest, highest); "" = TLS 1.2 and up."""
    if not text.strip():
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.MAXIMUM_SUPPORTED
    versions = []
    for word in text.split():
        version = _VERSIONS.get(word.lower())
        if version is None:
            raise ConfigError(f"TLS: unsupported protocol '{word}' in tls-protocols "
                              "(TLSv1.2, TLSv1.3)")
        versions.append(version)
    return min(versions), max(versions)


def client_port_context(config: Any) -> ssl.SSLContext:
    """The server side of the TLS client port."""
    ctx = _context(config, ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                       "no": ssl.CERT_NONE}[config.tls_auth_clients]
    return ctx


def bus_contexts(config: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting, connecting) contexts of the TLS bus: mutual authentication."""
    server = _context(config, ssl.Purpose.CLIENT_AUTH)
    server.verify_mode = ssl.CERT_REQUIRED
    client = _context(config, ssl.Purpose.SERVER_AUTH)
    client.check_hostname = False  # peers are dialled by IP: the CA is what counts
    client.verify_mode = ssl.CERT_REQUIRED
    return server, client


_FILES = ("tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir")


def prepare(config: Any) -> None:
    """At start-up: make the certificate paths absolute (the node enters `dir` later),
    and build every context the configuration asks for, so that a missing or
    unreadable file stops the start with a clear error."""
    for name in _FILES:
        path = config.values[name]
        if path:
            config.apply(name, [os.path.abspath(path)])
    if config.tls_port:
        client_port_context(config)
    if config.tls_cluster:
        bus_contexts(config)
