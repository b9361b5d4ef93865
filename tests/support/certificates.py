"""A throwaway CA and a server certificate for 127.0.0.1, made with the `openssl` CLI."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerCertificate:
    ca_cert: Path
    cert: Path
    key: Path


def _openssl(*arguments: str, cwd: Path) -> None:
    subprocess.run(["openssl", *arguments], cwd=cwd, check=True, capture_output=True,
                   timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return cert, key


def make_server_certificate(directory: Path) -> ServerCertificate:
    """A certificate for IP 127.0.0.1 (and localhost) signed by a new CA."""
    ca_cert, ca_key = make_ca(directory, "test-ca")
    key, cert = directory / "server.key", directory / "server.crt"
    request = directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                          "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(request), "-subj", "/CN=127.0.0.1", cwd=directory)
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extensions),
             cwd=directory)
    return ServerCertificate(ca_cert, cert, key)
