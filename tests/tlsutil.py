"""Certificates for the TLS tests, made with the `openssl` command in a temporary
directory: a CA, a node certificate (server and client use, for 127.0.0.1 and
localhost), a client certificate, and a second CA with a node certificate of its own
(a node the first CA's cluster must refuse)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

HAVE_OPENSSL = shutil.which("openssl") is not None
needs_openssl = pytest.mark.skipif(not HAVE_OPENSSL, reason="the openssl command is missing")

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_LEAF_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
             "extendedKeyUsage=serverAuth,clientAuth\n"
             "subjectAltName=IP:127.0.0.1,DNS:localhost\n")


@dataclass
class Certs:
    ca: Path
    node_cert: Path
    node_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_cert: Path  # signed by other_ca
    other_key: Path

    def server_args(self, ca: Path | None = None, cert: Path | None = None,
                    key: Path | None = None) -> list[str]:
        """The --tls-* flags of a node using these files."""
        return ["--tls-cert-file", str(cert or self.node_cert),
                "--tls-key-file", str(key or self.node_key),
                "--tls-ca-cert-file", str(ca or self.ca)]

    def redis_kwargs(self, client_cert: bool = True) -> dict:
        """redis-py's options for a TLS connection with (or without) a certificate."""
        kwargs: dict = {"ssl": True, "ssl_ca_certs": str(self.ca)}
        if client_cert:
            kwargs.update(ssl_certfile=str(self.client_cert), ssl_keyfile=str(self.client_key))
        return kwargs


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    _run("req", "-x509", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.crt",
         "-days", "2", "-subj", f"/CN=disq test {name}",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"


def _leaf(directory: Path, name: str, ca: str) -> tuple[Path, Path]:
    (directory / "leaf.ext").write_text(_LEAF_EXT)
    _run("req", "-new", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", f"/CN=disq test {name}", cwd=directory)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "leaf.ext",
         cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca, _ = _ca(directory, "ca")
    node_cert, node_key = _leaf(directory, "node", "ca")
    client_cert, client_key = _leaf(directory, "client", "ca")
    other_ca, _ = _ca(directory, "otherca")
    other_cert, other_key = _leaf(directory, "other", "otherca")
    return Certs(ca, node_cert, node_key, client_cert, client_key, other_ca, other_cert,
                 other_key)
