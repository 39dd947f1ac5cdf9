"""TLS options of the clients: `ssl=True` (the system's CAs, or `ssl_ca_certs`), a
client certificate (`ssl_certfile`, `ssl_keyfile`: a node with `tls-auth-clients yes`
asks for one), or a ready `ssl.SSLContext`."""

from __future__ import annotations

import ssl

SSLOption = bool | ssl.SSLContext | None


def ssl_context(option: SSLOption = True, *, ca_certs: str | None = None,
                certfile: str | None = None, keyfile: str | None = None,
                check_hostname: bool = True) -> ssl.SSLContext | None:
    """The context connections use, or None for plain TCP. Any ssl_* file implies
    TLS; a context given as `option` is used as is."""
    if isinstance(option, ssl.SSLContext):
        return option
    if not option and not (ca_certs or certfile):
        return None
    ctx = ssl.create_default_context(cafile=ca_certs)
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx
