"""The web config file (`--web.config.file`): TLS, basic auth and response headers.

The format is the exporter-toolkit one that node_exporter reads, so operators can reuse
one file across exporters::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12             # TLS12 (default) or TLS13
      max_version: TLS13             # optional
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2b$12$...         # bcrypt hash

Differences from exporter-toolkit, each one refused with a clear error rather than silently
ignored: TLS10/TLS11, `cipher_suites`, `curve_preferences`, inline `cert`/`key`/`client_ca`,
`client_allowed_sans`, `rate_limit` and `RequireAnyClientCert` (Python's ssl module cannot
accept a client certificate without verifying it) are not supported, and the verifying client
auth types need `client_ca_file` (Go would fall back to the system roots, which lets any
publicly signed client certificate in). `RequestClientCert` asks for nothing: Go requests a
certificate and ignores it, so clients see the same thing. `http_server_config.http2` is
accepted and ignored (the server speaks HTTP/1.1).

Nothing here touches the network; `load_web_config` raises `WebConfigError` with one line
that names the file and the problem.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_exporter.serving.basic_auth import BasicAuth


class WebConfigError(Exception):
    """The web config file cannot be used; the message is one line naming file and problem."""


#: Response headers that may be configured, and the values allowed where they are an
#: enumeration; the same allowlist as exporter-toolkit's (matched case-insensitively here).
ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
)
_HTTP_KEYS = ("headers", "http2")
# exporter-toolkit keys this exporter knows about but does not implement
_UNSUPPORTED = {
    "rate_limit": "rate_limit",
    "cert": "inline cert (use cert_file)",
    "key": "inline key (use key_file)",
    "client_ca": "inline client_ca (use client_ca_file)",
    "cipher_suites": "cipher_suites",
    "curve_preferences": "curve_preferences",
    "client_allowed_sans": "client_allowed_sans",
}
_BCRYPT_HASH = re.compile(rb"^\$2[aby]?\$(\d\d)\$[./A-Za-z0-9]{53}$")


@dataclass(frozen=True)
class TlsSettings:
    """The TLS part; paths are absolute (resolved against the config file's directory)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True)
class WebConfig:
    """A loaded, validated web config. `WebConfig()` is "no file": plain HTTP, no auth."""

    path: str | None = None
    tls: TlsSettings | None = None
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: BasicAuth | None = None

    @property
    def watched_files(self) -> tuple[str, ...]:
        """Files whose change means the config must be re-read."""
        files: list[str] = [] if self.path is None else [self.path]
        if self.tls is not None:
            files += [self.tls.cert_file, self.tls.key_file]
            if self.tls.client_ca_file:
                files.append(self.tls.client_ca_file)
        return tuple(files)


def load_web_config(path: str | None) -> WebConfig:
    """Read and validate the file; `None` gives the empty config (plain HTTP, no auth)."""
    if path is None:
        return WebConfig()
    return _Loader(path).load()


class _Loader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(os.path.abspath(path))

    def fail(self, problem: str) -> WebConfigError:
        return WebConfigError(f"web config {self.path}: {problem}")

    def load(self) -> WebConfig:
        try:
            with open(self.path, "rb") as handle:
                text = handle.read()
        except OSError as error:
            raise self.fail(f"cannot read: {error.strerror or error}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
            raise self.fail(f"invalid YAML: {where}{error.problem or error.context}") from None
        except yaml.YAMLError as error:
            raise self.fail(f"invalid YAML: {error}") from None
        top = self.mapping(data, "the file", _TOP_KEYS)
        tls, context = self.tls(top.get("tls_server_config"))
        users = self.users(top.get("basic_auth_users"))
        headers = self.headers(top.get("http_server_config"))
        return WebConfig(
            path=self.path,
            tls=tls,
            ssl_context=context,
            users=users,
            headers=headers,
            auth=BasicAuth(users) if users else None,
        )

    def mapping(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a mapping, not {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(f"{where}: key {key!r} must be a string")
            if key in _UNSUPPORTED:
                raise self.fail(f"{where}: {_UNSUPPORTED[key]} is not supported by gpu-exporter")
            if key not in keys:
                raise self.fail(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
        return value

    def string(self, section: dict[str, Any], key: str, where: str) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key} must be a string, not {_kind(value)}")
        return value

    def file(self, section: dict[str, Any], key: str) -> str | None:
        value = self.string(section, key, "tls_server_config")
        return None if value is None else os.path.join(self.directory, value)

    def tls(self, value: Any) -> tuple[TlsSettings | None, ssl.SSLContext | None]:
        section = self.mapping(value, "tls_server_config", _TLS_KEYS)
        where = "tls_server_config"
        cert = self.file(section, "cert_file")
        key = self.file(section, "key_file")
        ca = self.file(section, "client_ca_file")
        given_auth = self.string(section, "client_auth_type", where)
        auth = given_auth or "NoClientCert"
        if cert is None and key is None and ca is None and given_auth is None:
            return None, None  # as exporter-toolkit: no TLS settings means plain HTTP
        if cert is None:
            raise self.fail(f"{where}: cert_file is missing")
        if key is None:
            raise self.fail(f"{where}: key_file is missing")
        if auth not in CLIENT_AUTH_TYPES:
            raise self.fail(
                f"{where}.client_auth_type: {auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}"
            )
        if auth == "RequireAnyClientCert":
            raise self.fail(
                f"{where}.client_auth_type: RequireAnyClientCert is not supported (Python's ssl "
                "cannot accept a client certificate without verifying it); use "
                "RequireAndVerifyClientCert with client_ca_file"
            )
        verifying = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
        if verifying and ca is None:
            raise self.fail(f"{where}: client_auth_type {auth} needs client_ca_file")
        if ca is not None and not verifying:
            raise self.fail(
                f"{where}: client_ca_file is set but client_auth_type {auth} never verifies "
                "client certificates (use RequireAndVerifyClientCert)"
            )
        min_version = self.version(section, "min_version") or "TLS12"
        max_version = self.version(section, "max_version")
        if max_version is not None and TLS_VERSIONS[max_version] < TLS_VERSIONS[min_version]:
            raise self.fail(
                f"{where}: max_version {max_version} is below min_version {min_version}"
            )
        prefer = section.get("prefer_server_cipher_suites", True)
        if not isinstance(prefer, bool):
            raise self.fail(f"{where}.prefer_server_cipher_suites must be true or false")

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = TLS_VERSIONS[min_version]
        if max_version is not None:
            context.maximum_version = TLS_VERSIONS[max_version]
        if prefer:
            context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:
            context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        context.set_alpn_protocols(["http/1.1"])
        self.load_pair(context, cert, key)
        if ca is not None:
            self.readable(ca, "client_ca_file")
            try:
                context.load_verify_locations(cafile=ca)
            except ssl.SSLError as error:
                raise self.fail(
                    f"client_ca_file {ca}: no usable PEM CA certificate ({_ssl_reason(error)})"
                ) from None
            context.verify_mode = (
                ssl.CERT_REQUIRED if auth == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
            )
        else:
            context.verify_mode = ssl.CERT_NONE
        settings = TlsSettings(cert, key, ca, auth, min_version, max_version)
        return settings, context

    def version(self, section: dict[str, Any], key: str) -> str | None:
        value = self.string(section, key, "tls_server_config")
        if value is None:
            return None
        if value in ("TLS10", "TLS11"):
            raise self.fail(
                f"tls_server_config.{key}: {value} is not supported; use TLS12 or TLS13"
            )
        if value not in TLS_VERSIONS:
            raise self.fail(f"tls_server_config.{key}: {value!r} is not TLS12 or TLS13")
        return value

    def readable(self, path: str, key: str) -> None:
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except OSError as error:
            raise self.fail(f"{key} {path}: {error.strerror or error}") from None

    def load_pair(self, context: ssl.SSLContext, cert: str, key: str) -> None:
        self.readable(cert, "cert_file")
        self.readable(key, "key_file")
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            probe.load_verify_locations(cafile=cert)
        except ssl.SSLError as error:
            raise self.fail(
                f"cert_file {cert}: not a PEM certificate ({_ssl_reason(error)})"
            ) from None

        def encrypted() -> bytes:
            raise self.fail(f"key_file {key}: the key is encrypted; give an unencrypted key")

        try:
            context.load_cert_chain(cert, key, password=encrypted)
        except ssl.SSLError as error:
            if "KEY_VALUES_MISMATCH" in str(error):
                raise self.fail(f"key_file {key} does not match cert_file {cert}") from None
            raise self.fail(
                f"key_file {key}: not a usable PEM private key ({_ssl_reason(error)})"
            ) from None

    def users(self, value: Any) -> dict[str, bytes]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"basic_auth_users must be a mapping of user: hash, not {_kind(value)}")
        users: dict[str, bytes] = {}
        for user, hashed in value.items():
            if not isinstance(user, str) or not user:
                raise self.fail(f"basic_auth_users: user {user!r} must be a non-empty string")
            if ":" in user:
                raise self.fail(f"basic_auth_users: user {user!r} must not contain ':'")
            if not isinstance(hashed, str):
                raise self.fail(f"basic_auth_users.{user}: must be a bcrypt hash string")
            raw = hashed.strip().encode("ascii", "replace")
            match = _BCRYPT_HASH.match(raw)
            if match is None or not 4 <= int(match.group(1)) <= 31:
                raise self.fail(
                    f"basic_auth_users.{user}: not a bcrypt hash (expected $2b$<cost>$ followed "
                    "by 53 characters, as made by htpasswd -nBC 10)"
                )
            users[user] = raw
        return users

    def headers(self, value: Any) -> dict[str, str]:
        section = self.mapping(value, "http_server_config", _HTTP_KEYS)
        http2 = section.get("http2")
        if http2 is not None and not isinstance(http2, bool):
            raise self.fail("http_server_config.http2 must be true or false")
        raw = section.get("headers")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(f"http_server_config.headers must be a mapping, not {_kind(raw)}")
        canonical = {name.lower(): name for name in ALLOWED_HEADERS}
        headers: dict[str, str] = {}
        for name, header_value in raw.items():
            proper = canonical.get(str(name).lower())
            if proper is None:
                raise self.fail(
                    f"http_server_config.headers: {name!r} can not be configured (allowed: "
                    f"{', '.join(ALLOWED_HEADERS)})"
                )
            if not isinstance(header_value, str) or not header_value.strip():
                raise self.fail(f"http_server_config.headers.{proper}: must be a non-empty string")
            if any(c in header_value for c in "\r\n\0"):
                raise self.fail(f"http_server_config.headers.{proper}: must be a single line")
            allowed = ALLOWED_HEADERS[proper]
            if allowed and header_value.lower() not in allowed:
                raise self.fail(
                    f"http_server_config.headers.{proper}: {header_value!r} is not one of "
                    f"{', '.join(allowed)}"
                )
            headers[proper] = header_value
        return headers


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _ssl_reason(error: ssl.SSLError) -> str:
    return str(error.reason or error.strerror or error).replace("\n", " ")
