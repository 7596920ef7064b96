"""The web config file (`--web.config.file`): TLS, basic auth, response headers, rate limit.

The format is the exporter-toolkit one that node_exporter reads, so operators can reuse
one file across exporters::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key           # or cert: / key: with the PEM text inline
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt # or client_ca: with the PEM text inline
      client_allowed_sans: [prometheus.example.com]
      min_version: TLS12             # TLS12 (default) or TLS13
      max_version: TLS13             # optional
      cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]  # Go names, TLS 1.2
      curve_preferences: [X25519]    # Go names; only the first is used
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2b$12$...         # bcrypt hash
    rate_limit:
      interval: 1s                   # one request per interval on average ...
      burst: 10                      # ... after a burst of this many; more get 429

Scalars are read as Go's yaml.v2 reads them into exporter-toolkit's typed fields: a
string field takes the text as written (`X-XSS-Protection: 1` is "1"), a boolean field
takes only YAML booleans. The file is read by `gpu_exporter.yamlfile`, as every file an
operator gives us: at most 1 MiB, UTF-8 (or UTF-16 with a byte order mark), without YAML
aliases and without a key given twice.

Differences from exporter-toolkit, each one refused with a clear error rather than
silently ignored unless said otherwise:

- TLS10/TLS11 and `RequireAnyClientCert` (Python's ssl cannot accept a client
  certificate without verifying it) are not supported.
- `RequireAndVerifyClientCert` needs `client_ca_file` (or `client_ca`): Go would fall back
  to the system roots, which lets any publicly signed client certificate in.
  `VerifyClientCertIfGiven` without one verifies against the system roots, as in Go.
- `client_ca_file` with `RequestClientCert` is refused: that type never verifies.
  `RequestClientCert` asks for nothing: Go requests a certificate and ignores it, so
  clients see the same thing.
- `curve_preferences`: only the first curve is offered (Python's ssl sets one); a list of
  more is accepted with a warning. `cipher_suites` naming only TLS 1.3 suites (which are
  not configurable) is refused unless `min_version` is TLS13.
- `client_allowed_sans` needs a verifying `client_auth_type`; a client without a
  certificate is then refused (in Go its connection fails too).
- A file and inline PEM for the same thing (`cert_file` and `cert`) is refused; Go
  silently takes the file.
- TLS keys other than the certificate, key, CA and client auth type, given without a
  certificate, are refused; Go serves plain HTTP and ignores them.
- `rate_limit.interval` needs a unit ("1s"): a bare number other than 0 is refused (Go
  reads it as nanoseconds). The limit spares the probes, /livez and /healthz, and is
  re-read with the file (exporter-toolkit fixes it at start).
- Header names and the enumerated values are matched case-insensitively; header values
  must be printable ASCII and not empty.
- YAML aliases are refused.
- `http_server_config.http2` is accepted and ignored (the server speaks HTTP/1.1), so
  the HTTP/2 cipher requirement does not apply either.

Nothing here touches the network; `load_web_config` raises `WebConfigError` with one line
that names the file and the problem, whatever the file holds.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpu_exporter.records import Record
from gpu_exporter.serving.basic_auth import BasicAuth
from gpu_exporter.serving.rate_limit import RateLimit, TokenBucket, parse_go_duration
from gpu_exporter.serving.tls_settings import (
    GO_CIPHERS,
    GO_CURVES,
    GO_TLS13_CIPHERS,
    TLS_VERSION_NAMES,
    Pem,
    TlsError,
    TlsSettings,
)
from gpu_exporter.yamlfile import Scalar, YamlFileError, read_yaml

if TYPE_CHECKING:
    import ssl

MAX_MESSAGE_CHARS = 400


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
_VERIFYING = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "cert",
    "key",
    "client_ca_file",
    "client_ca",
    "client_auth_type",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
)
_TLS_SWITCHES = ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca")
_HTTP_KEYS = ("headers", "http2")
_RATE_KEYS = ("interval", "burst")
_BCRYPT_HASH = re.compile(rb"^\$2[aby]?\$(\d\d)\$[./A-Za-z0-9]{53}$")


@dataclass(frozen=True, repr=False)
class WebConfig(Record):
    """A loaded, validated web config. `WebConfig()` is "no file": plain HTTP, no auth."""

    path: str | None = None
    tls: TlsSettings | None = None
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: BasicAuth | None = None
    rate_limit: RateLimit | None = None  # None: no limit
    limiter: TokenBucket | None = None
    notes: tuple[str, ...] = ()  # warnings to log when the config comes into force

    @property
    def watched_files(self) -> tuple[str, ...]:
        """Files whose change means the config must be re-read."""
        files: list[str] = [] if self.path is None else [self.path]
        if self.tls is not None:
            files += self.tls.files
        return tuple(files)

    def carry_over(self, old: WebConfig) -> WebConfig:
        """This config taking over `old`'s remembered logins and bcrypt queue, and its
        rate-limit bucket when the limit is unchanged (so a re-read does not refill it)."""
        if self.auth is not None and old.auth is not None:
            self.auth.adopt(old.auth)
        if self.rate_limit is not None and self.rate_limit == old.rate_limit:
            return dataclasses.replace(self, limiter=old.limiter)
        return self


def load_web_config(path: str | None) -> WebConfig:
    """Read and validate the file; `None` gives the empty config (plain HTTP, no auth).

    Raises WebConfigError, and nothing else, whatever the file holds.
    """
    if path is None:
        return WebConfig()
    loader = _Loader(path)
    try:
        return loader.load()
    except WebConfigError:
        raise
    except Exception as error:  # a safety net: a bad file must never crash the exporter
        raise loader.fail(f"cannot be used ({type(error).__name__}: {error})") from None


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` with every run of whitespace made one space, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Loader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(os.path.abspath(path))
        self.notes: list[str] = []

    def fail(self, problem: str) -> WebConfigError:
        return WebConfigError(one_line(f"web config {self.path}: {problem}"))

    def load(self) -> WebConfig:
        try:
            data = read_yaml(self.path, keep_text=True)
        except YamlFileError as error:
            raise self.fail(str(error)) from None
        top = self.mapping(data, "the file", _TOP_KEYS)
        tls, context = self.tls(top.get("tls_server_config"))
        users = self.users(top.get("basic_auth_users"))
        headers = self.headers(top.get("http_server_config"))
        rate_limit = self.rate_limit(top.get("rate_limit"))
        return WebConfig(
            path=self.path,
            tls=tls,
            ssl_context=context,
            users=users,
            headers=headers,
            auth=BasicAuth(users) if users else None,
            rate_limit=rate_limit,
            limiter=TokenBucket(rate_limit) if rate_limit is not None else None,
            notes=tuple(self.notes),
        )

    # --- shapes -------------------------------------------------------------------------

    def mapping(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a mapping, not {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(f"{where}: key {_show(key)} must be a string")
            if key not in keys:
                raise self.fail(f"{where}: unknown key {_show(key)} (known: {', '.join(keys)})")
        return value

    def string(self, section: dict[str, Any], key: str, where: str) -> str | None:
        """A string field: any scalar, as written (as Go's yaml.v2 reads it); "" is None."""
        value = section.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key} must be a string, not {_kind(value)}")
        return str(value)

    def strings(self, section: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
        """A list of strings; None when the key is absent or null."""
        value = section.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(f"{where}.{key} must be a list of strings, not {_kind(value)}")
        for item in value:
            if not isinstance(item, str) or not item:
                raise self.fail(f"{where}.{key}: {_show(item)} must be a non-empty string")
        return tuple(str(item) for item in value)

    def boolean(self, section: dict[str, Any], key: str, where: str, default: bool) -> bool:
        value = section.get(key)
        if value is None:
            return default
        if isinstance(value, Scalar) and isinstance(value.value, bool):
            return value.value
        raise self.fail(f"{where}.{key} must be true or false, not {_kind(value)}")

    # --- tls_server_config ----------------------------------------------------------------

    def pem(self, section: dict[str, Any], file_key: str, inline_key: str) -> Pem | None:
        where = "tls_server_config"
        path = self.string(section, file_key, where)
        text = self.string(section, inline_key, where)
        if path is not None and text is not None:
            raise self.fail(f"{where}: give {file_key} or {inline_key}, not both")
        if path is not None:
            return Pem(file_key, path=os.path.join(self.directory, path))
        if text is not None:
            return Pem(inline_key, text=text)
        return None

    def tls(self, value: Any) -> tuple[TlsSettings | None, ssl.SSLContext | None]:
        where = "tls_server_config"
        section = self.mapping(value, where, _TLS_KEYS)
        cert = self.pem(section, "cert_file", "cert")
        key = self.pem(section, "key_file", "key")
        ca = self.pem(section, "client_ca_file", "client_ca")
        given_auth = self.string(section, "client_auth_type", where)
        if cert is None and key is None and ca is None and given_auth is None:
            # as exporter-toolkit: no certificate settings means plain HTTP
            ignored = [k for k in _TLS_KEYS if k not in _TLS_SWITCHES and section.get(k)]
            if ignored:
                raise self.fail(
                    f"{where}: {', '.join(ignored)} set without a certificate; give cert_file "
                    "and key_file for TLS"
                )
            return None, None
        if cert is None:
            raise self.fail(f"{where}: cert_file is missing (or give the PEM text as cert)")
        if key is None:
            raise self.fail(f"{where}: key_file is missing (or give the PEM text as key)")
        auth = self.client_auth(given_auth or "NoClientCert", ca)
        sans = self.strings(section, "client_allowed_sans", where)
        if sans is not None and auth not in _VERIFYING:
            raise self.fail(
                f"{where}: client_allowed_sans needs client_auth_type RequireAndVerifyClientCert "
                f"(or VerifyClientCertIfGiven), not {auth}"
            )
        min_version = self.version(section, "min_version") or "TLS12"
        max_version = self.version(section, "max_version")
        order = TLS_VERSION_NAMES.index
        if max_version is not None and order(max_version) < order(min_version):
            raise self.fail(
                f"{where}: max_version {max_version} is below min_version {min_version}"
            )
        settings = TlsSettings(
            cert=cert,
            key=key,
            client_ca=ca,
            client_auth_type=auth,
            min_version=min_version,
            max_version=max_version,
            cipher_suites=self.ciphers(section),
            curve=self.curve(section),
            prefer_server_cipher_suites=self.boolean(
                section, "prefer_server_cipher_suites", where, default=True
            ),
            client_allowed_sans=sans,
        )
        from gpu_exporter.serving.tls_context import build_context  # ssl only for TLS

        try:
            return settings, build_context(settings)
        except TlsError as error:
            raise self.fail(str(error)) from None

    def client_auth(self, auth: str, ca: Pem | None) -> str:
        where = "tls_server_config"
        if auth == "RequireClientCert":  # exporter-toolkit's old name for it
            auth = "RequireAnyClientCert"
        if auth not in CLIENT_AUTH_TYPES:
            raise self.fail(
                f"{where}.client_auth_type: {_show(auth)} is not one of "
                f"{', '.join(CLIENT_AUTH_TYPES)}"
            )
        if auth == "RequireAnyClientCert":
            raise self.fail(
                f"{where}.client_auth_type: RequireAnyClientCert is not supported (Python's ssl "
                "cannot accept a client certificate without verifying it); use "
                "RequireAndVerifyClientCert with client_ca_file"
            )
        if auth == "RequireAndVerifyClientCert" and ca is None:
            raise self.fail(
                f"{where}: client_auth_type {auth} needs client_ca_file (without it any "
                "client certificate signed by a public CA would be let in)"
            )
        if ca is not None and auth not in _VERIFYING:
            raise self.fail(
                f"{where}: {ca.key} is set but client_auth_type {auth} never verifies "
                "client certificates (use RequireAndVerifyClientCert)"
            )
        if auth == "VerifyClientCertIfGiven" and ca is None:
            self.notes.append(
                "client_auth_type VerifyClientCertIfGiven without client_ca_file: client "
                "certificates are verified against the system's CA certificates"
            )
        return auth

    def version(self, section: dict[str, Any], key: str) -> str | None:
        value = self.string(section, key, "tls_server_config")
        if value is None:
            return None
        if value in ("TLS10", "TLS11"):
            raise self.fail(
                f"tls_server_config.{key}: {value} is not supported; use TLS12 or TLS13"
            )
        if value not in TLS_VERSION_NAMES:
            raise self.fail(f"tls_server_config.{key}: {_show(value)} is not TLS12 or TLS13")
        return value

    def ciphers(self, section: dict[str, Any]) -> tuple[str, ...]:
        names = self.strings(section, "cipher_suites", "tls_server_config") or ()
        for name in names:
            if name not in GO_CIPHERS and name not in GO_TLS13_CIPHERS:
                raise self.fail(
                    f"tls_server_config.cipher_suites: unknown cipher {_show(name)} (Go names, "
                    "such as TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)"
                )
        return names

    def curve(self, section: dict[str, Any]) -> str | None:
        names = self.strings(section, "curve_preferences", "tls_server_config") or ()
        for name in names:
            if name not in GO_CURVES:
                raise self.fail(
                    f"tls_server_config.curve_preferences: unknown curve {_show(name)} (one of "
                    f"{', '.join(GO_CURVES)})"
                )
        if len(names) > 1:
            self.notes.append(
                f"curve_preferences: Python's ssl offers one curve; only {names[0]} (the "
                f"first listed) is used, not {', '.join(names[1:])}"
            )
        return names[0] if names else None

    # --- basic_auth_users -----------------------------------------------------------------

    def users(self, value: Any) -> dict[str, bytes]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"basic_auth_users must be a mapping of user: hash, not {_kind(value)}")
        users: dict[str, bytes] = {}
        for user, hashed in value.items():
            if not isinstance(user, str) or not user:
                raise self.fail(f"basic_auth_users: user {_show(user)} must be a non-empty string")
            if ":" in user:
                raise self.fail(f"basic_auth_users: user {_show(user)} must not contain ':'")
            where = f"basic_auth_users.{one_line(user, 60)}"
            if not isinstance(hashed, str):
                raise self.fail(f"{where}: must be a bcrypt hash string, not {_kind(hashed)}")
            raw = hashed.strip().encode("ascii", "replace")
            match = _BCRYPT_HASH.match(raw)
            if match is None or not 4 <= int(match.group(1)) <= 31:
                raise self.fail(
                    f"{where}: not a bcrypt hash (expected $2b$<cost>$ followed by 53 "
                    "characters, as made by htpasswd -nBC 10)"
                )
            users[str(user)] = raw
        return users

    # --- http_server_config ---------------------------------------------------------------

    def headers(self, value: Any) -> dict[str, str]:
        section = self.mapping(value, "http_server_config", _HTTP_KEYS)
        self.boolean(section, "http2", "http_server_config", default=True)  # checked, unused
        raw = section.get("headers")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(f"http_server_config.headers must be a mapping, not {_kind(raw)}")
        canonical = {name.lower(): name for name in ALLOWED_HEADERS}
        headers: dict[str, str] = {}
        for name, header_value in raw.items():
            proper = canonical.get(str(name).lower()) if isinstance(name, str) else None
            if proper is None:
                raise self.fail(
                    f"http_server_config.headers: {_show(name)} can not be configured (allowed: "
                    f"{', '.join(ALLOWED_HEADERS)})"
                )
            where = f"http_server_config.headers.{proper}"
            if not isinstance(header_value, str) or not header_value.strip():
                raise self.fail(f"{where}: must be a non-empty string, not {_kind(header_value)}")
            if any(c in header_value for c in "\r\n\0"):
                raise self.fail(f"{where}: must be a single line")
            bad = next((c for c in header_value if not (" " <= c <= "~" or c == "\t")), None)
            if bad is not None:
                raise self.fail(
                    f"{where}: {_show(bad)} (U+{ord(bad):04X}) can not be sent in an HTTP "
                    "header; use printable ASCII only"
                )
            allowed = ALLOWED_HEADERS[proper]
            if allowed and header_value.lower() not in allowed:
                raise self.fail(
                    f"{where}: {_show(str(header_value))} is not one of {', '.join(allowed)}"
                )
            headers[proper] = str(header_value)
        return headers

    # --- rate_limit -----------------------------------------------------------------------

    def rate_limit(self, value: Any) -> RateLimit | None:
        section = self.mapping(value, "rate_limit", _RATE_KEYS)
        interval = self.interval(section.get("interval"))
        burst = section.get("burst")
        if burst is None:
            burst = 0
        elif isinstance(burst, Scalar) and type(burst.value) is int and burst.value >= 0:
            burst = burst.value
        else:
            raise self.fail(
                f"rate_limit.burst must be a whole number, 0 or more, not {_show(burst)}"
            )
        if interval == 0:
            return None  # as exporter-toolkit: no interval, no limit
        if burst == 0:
            self.notes.append(
                "rate_limit.burst is 0: every request but /livez and /healthz gets 429 (as "
                "exporter-toolkit does)"
            )
        return RateLimit(interval, burst)

    def interval(self, value: Any) -> float:
        if value is None:
            return 0.0
        if isinstance(value, Scalar) and type(value.value) is int:
            if value.value == 0:
                return 0.0
            raise self.fail(
                f"rate_limit.interval: {_show(value)} has no unit; write it as a Go duration "
                "such as 1s or 500ms (exporter-toolkit would read a bare number as nanoseconds)"
            )
        seconds = parse_go_duration(value) if isinstance(value, str) else None
        if seconds is None:
            raise self.fail(
                f"rate_limit.interval: {_show(value)} is not a duration such as 1s, 500ms or 1m"
            )
        return seconds


def _kind(value: Any) -> str:
    if isinstance(value, Scalar):
        value = value.value
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    import datetime  # here, not at the top: only a message about a value needs it (0.5 MB kept)

    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    kinds: dict[type, str] = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bytes: "binary data",
    }
    return kinds.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, for naming what the operator wrote."""
    text = repr(str(value) if isinstance(value, str) else value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
