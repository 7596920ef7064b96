"""Client contexts and in-memory TLS handshakes (ssl.MemoryBIO) for tests: no sockets."""

from __future__ import annotations

import ssl
from pathlib import Path

from gpu_exporter.serving.tls_context import handshake_in_memory
from tests.support.certs import KeyPair


def client(
    ca: Path,
    *,
    version: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
    curve: str | None = None,
    cert: KeyPair | None = None,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    if version is not None:
        context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if curve is not None:
        context.set_ecdh_curve(curve)
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context


class Handshake:
    """Both ends of a finished in-memory handshake (ssl.SSLError if it fails)."""

    def __init__(self, server: ssl.SSLContext, client: ssl.SSLContext) -> None:
        self.server, self.client = handshake_in_memory(server, client, "localhost")

    @property
    def cipher(self) -> str:
        cipher = self.client.cipher()
        assert cipher is not None
        return cipher[0]
