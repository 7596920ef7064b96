"""The web config's `tls_server_config` as validated settings, without importing ssl.

`serving.web_config` checks a web config against these names and builds `TlsSettings`;
only `serving.tls_context` (imported when a web config asks for TLS) turns them into an
ssl.SSLContext. An exporter serving plain HTTP so never loads ssl and OpenSSL, about
4 MiB of resident memory.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from gpu_exporter.records import Record

#: Go cipher suite names (crypto/tls `CipherSuites()`, TLS 1.0-1.2) -> OpenSSL names.
GO_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
#: Go's TLS 1.3 suite names: accepted, not configurable (as in Go).
GO_TLS13_CIPHERS = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
)
#: Go curve names -> OpenSSL group names.
GO_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
#: The TLS versions exporter-toolkit accepts, oldest first.
TLS_VERSION_NAMES = ("TLS12", "TLS13")


class TlsError(Exception):
    """The TLS settings cannot be used; the message is one line (without the file name)."""


@dataclass(frozen=True, repr=False)
class Pem(Record):
    """A certificate, key or CA bundle: a file (`path`, absolute) or inline PEM `text`."""

    key: str  # the web config key it came from: cert_file, cert, key_file, key, ...
    path: str | None = None
    text: str | None = None

    @property
    def name(self) -> str:
        """How messages name it: `cert_file /etc/x.crt`, or `cert (inline)`."""
        if self.path is None:
            return f"{self.key} (inline)"
        path = self.path if len(self.path) <= 120 else f"{self.path[:80]}...{self.path[-30:]}"
        return f"{self.key} {path}"


@dataclass(frozen=True, repr=False)
class TlsSettings(Record):
    """A validated `tls_server_config`."""

    cert: Pem
    key: Pem
    client_ca: Pem | None = None  # None: no client CA (system roots for VerifyClientCertIfGiven)
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None  # None: the newest, TLS13
    cipher_suites: tuple[str, ...] = ()  # Go names; () means OpenSSL's defaults
    curve: str | None = None  # the one curve offered (Go name); None: OpenSSL's defaults
    prefer_server_cipher_suites: bool = True
    client_allowed_sans: tuple[str, ...] | None = None  # None: any verified certificate

    @property
    def cert_file(self) -> str | None:
        return self.cert.path

    @property
    def key_file(self) -> str | None:
        return self.key.path

    @property
    def client_ca_file(self) -> str | None:
        return self.client_ca.path if self.client_ca is not None else None

    @property
    def files(self) -> tuple[str, ...]:
        """The files the settings read (inline PEM text is not a file)."""
        pems = (self.cert, self.key, self.client_ca)
        return tuple(p.path for p in pems if p is not None and p.path is not None)


def client_allowed(peercert: dict[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """exporter-toolkit's `client_allowed_sans` rule for a verified client certificate.

    True when one of the certificate's subject alternative names (DNS names, email
    addresses, IP addresses, URIs) is in `allowed`, compared exactly. No certificate
    (`peercert` None or empty) is never allowed.
    """
    if not peercert:
        return False
    names: list[str] = []
    for kind, value in peercert.get("subjectAltName", ()):
        if kind in ("DNS", "email", "URI"):
            names.append(value)
        elif kind == "IP Address":
            try:
                names.append(str(ipaddress.ip_address(value.strip())))
            except ValueError:
                continue
    return any(name in allowed for name in names)
