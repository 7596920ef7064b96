"""exporter-toolkit's own web config test files, against this exporter's loader.

The table restates what each file in prometheus/exporter-toolkit `web/testdata/` (and
its example `web/web-config.yml`) holds, and what the toolkit does with it (from
`web/tls_config_test.go`, `web/tls_config.go` and `web/handler.go`): the facts, written
as YAML here, with this test's own certificates under the toolkit's file names. Each row
names the outcome expected here; where it differs from the toolkit's, the row says why.
The test compares what the loader does with what the row expects.

Certificates behind the toolkit's names: `server.crt`/`server.key` an RSA key (as the
toolkit's, whose RSA suites need one) for 127.0.0.1; `client_selfsigned.pem` and
`client2_selfsigned.pem` a client CA; a client certificate from it with the SAN `test3`
(as the toolkit's client2 has) for the SAN rows.
"""

from __future__ import annotations

import shutil
import ssl
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from gpu_exporter.serving.tls_settings import client_allowed
from gpu_exporter.serving.web_config import WebConfig, WebConfigError, load_web_config
from tests.support.certs import KeyPair, Pki, issue
from tests.support.tls_handshake import Handshake, client

LOADS = "loads"


@dataclass(frozen=True)
class Row:
    file: str  # in exporter-toolkit's web/testdata/ (web/ for the example)
    yaml: str  # what it holds; {cert_pem} and {key_pem} are the PEM text, indented
    toolkit: str  # what exporter-toolkit does: "loads" or "refused: <its error>"
    expected: str  # here: "loads" or "refused: <part of the one-line error>"
    why: str = ""  # why the two differ; required when one loads and the other refuses
    check: Callable[[WebConfig, Pki, Path], None] | None = None  # more about a loaded one


def headers_as_go(config: WebConfig, pki: Pki, directory: Path) -> None:
    assert config.headers == {
        "X-Frame-Options": "deny",
        "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
        "X-Content-Type-Options": "nosniff",
        "X-XSS-Protection": "1",  # a YAML integer, taken as its text as Go does
        "Content-Security-Policy": "default-src 'self' *.test.example.net",
    }


def sans_admit(expected: bool) -> Callable[[WebConfig, Pki, Path], None]:
    def check(config: WebConfig, pki: Pki, directory: Path) -> None:
        assert config.ssl_context is not None and config.tls is not None
        test3 = issue(pki.client_ca, directory, "test3", server=False)
        chosen = client(pki.ca.cert, cert=test3, version=ssl.TLSVersion.TLSv1_2)
        peer = Handshake(config.ssl_context, chosen).server.getpeercert()
        assert config.tls.client_allowed_sans is not None
        assert client_allowed(peer, config.tls.client_allowed_sans) is expected

    return check


def no_limit(config: WebConfig, pki: Pki, directory: Path) -> None:
    assert config.limiter is None


def refuses_everything(config: WebConfig, pki: Pki, directory: Path) -> None:
    assert config.limiter is not None
    assert not any(config.limiter.allow() for _ in range(10))  # 429, as the toolkit's test


def first_curve_only(config: WebConfig, pki: Pki, directory: Path) -> None:
    assert config.tls is not None and config.tls.curve == "CurveP256"
    assert config.notes


def users_loaded(config: WebConfig, pki: Pki, directory: Path) -> None:
    assert set(config.users) == {"alice", "bob", "carol", "dave"}


CERT_KEY = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
IF_GIVEN = CERT_KEY + "  client_auth_type: VerifyClientCertIfGiven\n"
ALL_CIPHERS = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
]
# bcrypt hashes with the costs and $2y$ prefix of the toolkit's users (alice 12, bob 18,
# carol and dave 10); their passwords do not matter to loading
_SALTED = bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode()[7:]
USERS = "basic_auth_users:\n" + "".join(
    f"  {user}: $2y${cost}${_SALTED}\n"
    for user, cost in (("alice", 12), ("bob", 18), ("carol", 10), ("dave", 10))
)
NO_ANY_CERT = "Python's ssl cannot accept a client certificate without verifying it"
NO_SYSTEM_ROOTS = (
    "without a client CA, Go verifies client certificates against the system roots, which "
    "lets any publicly signed client certificate in where the operator asked for mutual TLS"
)

TABLE = (
    Row("web-config.yml (example)", CERT_KEY, LOADS, LOADS),
    Row("web_config_empty.yml", "", LOADS, LOADS),
    Row(
        "tls_config_noAuth.requireandverifyclientcert.good.yml",
        CERT_KEY
        + "  client_auth_type: RequireAndVerifyClientCert\n"
        + "  client_ca_file: client_selfsigned.pem\n",
        LOADS,
        LOADS,
    ),
    Row(
        "tls_config_noAuth.requireanyclientcert.good.yml",
        CERT_KEY + "  client_auth_type: RequireAnyClientCert\n",
        LOADS,
        "refused: RequireAnyClientCert is not supported",
        NO_ANY_CERT,
    ),
    Row(
        "tls_config_noAuth.requireanyclientcertkeyinline.good.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key: {key_pem}"
        "  client_auth_type: RequireAnyClientCert\n",
        LOADS,
        "refused: RequireAnyClientCert is not supported",
        NO_ANY_CERT + " (the inline key alone would load)",
    ),
    Row(
        "web_config_auth_clientCAs_invalid.bad.yml",
        CERT_KEY + "  client_ca_file: somefile\n",
        "refused: no such file",
        "refused: client_ca_file is set but client_auth_type NoClientCert never verifies",
    ),
    Row(
        "web_config_auth_clientCAs_missing.bad.yml",
        CERT_KEY + "  client_auth_type: RequireAndVerifyClientCert\n",
        LOADS + " (tls_config.go accepts it; the toolkit's tests do not use this file)",
        "refused: RequireAndVerifyClientCert needs client_ca_file",
        NO_SYSTEM_ROOTS,
    ),
    Row(
        "web_config_noAuth.good.blocking.yml",
        CERT_KEY + "  client_auth_type: RequireAndVerifyClientCert\n",
        LOADS + " (and refuses clients without a certificate)",
        "refused: RequireAndVerifyClientCert needs client_ca_file",
        NO_SYSTEM_ROOTS,
    ),
    Row(
        "web_config_auth_client_san.good.yaml",
        CERT_KEY
        + "  client_auth_type: RequireAndVerifyClientCert\n"
        + "  client_ca_file: client2_selfsigned.pem\n"
        + "  client_allowed_sans: [one, test3, two]\n",
        LOADS + " (admits the client with SAN test3)",
        LOADS,
        check=sans_admit(True),
    ),
    Row(
        "web_config_auth_client_san.bad.yaml",
        CERT_KEY
        + "  client_auth_type: RequireAndVerifyClientCert\n"
        + "  client_ca_file: client2_selfsigned.pem\n"
        + "  client_allowed_sans: [bad]\n",
        LOADS + " (refuses the client with SAN test3: bad certificate)",
        LOADS,
        check=sans_admit(False),
    ),
    Row(
        "web_config_auth_user_list_invalid.bad.yml",
        CERT_KEY + "basic_auth_users:\n  john: doe\n",
        "refused: hashedSecret too short to be a bcrypted password",
        "refused: basic_auth_users.john: not a bcrypt hash",
    ),
    Row(
        "web_config_headers.good.yml",
        "http_server_config:\n  headers:\n"
        "    X-Frame-Options: deny\n"
        "    Strict-Transport-Security: max-age=31536000; includeSubDomains\n"
        "    X-Content-Type-Options: nosniff\n"
        "    X-XSS-Protection: 1\n"
        "    Content-Security-Policy: \"default-src 'self' *.test.example.net\"\n",
        LOADS,
        LOADS,
        check=headers_as_go,
    ),
    Row(
        "web_config_headers_content_type_options.bad.yml",
        "http_server_config: {headers: {X-Content-Type-Options: sniff}}\n",
        "refused: invalid value for X-Content-Type-Options",
        "refused: 'sniff' is not one of nosniff",
    ),
    Row(
        "web_config_headers_extra_header.bad.yml",
        "http_server_config: {headers: {Content-Type: foo}}\n",
        'refused: HTTP header "Content-Type" can not be configured',
        "refused: 'Content-Type' can not be configured",
    ),
    Row(
        "web_config_headers_frame_options.bad.yml",
        "http_server_config: {headers: {X-Frame-Options: foo}}\n",
        "refused: invalid value for X-Frame-Options",
        "refused: 'foo' is not one of deny, sameorigin",
    ),
    Row(
        "web_config_junk.yml",
        "".join(f"Junk{n}Line{n * 7}xYz\n" for n in range(20)),  # 20 lines of letters
        "refused: yaml error",
        "refused: the file must be a mapping, not a string",
    ),
    Row(
        "web_config_junk_key.yml",
        "tls_server_config:\n  cert_filse: server.crt\n",
        "refused: yaml error (field cert_filse not found)",
        "refused: unknown key 'cert_filse'",
    ),
    Row(
        "web_config_noAuth.bad.yml",
        CERT_KEY + "  client_ca_file: /dev/null\n",
        "refused: client CA's have been configured without a Client Auth Policy",
        "refused: client_ca_file is set but client_auth_type NoClientCert never verifies",
    ),
    Row("web_config_noAuth.good.yml", IF_GIVEN, LOADS, LOADS),
    Row(
        "web_config_noAuth_allCiphers.good.yml",
        IF_GIVEN + "  cipher_suites:\n" + "".join(f"  - {c}\n" for c in ALL_CIPHERS),
        LOADS,
        LOADS + " (the three TLS 1.3 suites are accepted and not configurable, as in Go)",
    ),
    Row(
        "web_config_noAuth_allCurves.good.yml",
        IF_GIVEN + "  curve_preferences: [CurveP256, CurveP384, CurveP521, X25519]\n",
        LOADS,
        LOADS + " (only CurveP256 is offered, with a warning: Python's ssl sets one curve)",
        check=first_curve_only,
    ),
    Row(
        "web_config_noAuth_certPath_empty.bad.yml",
        "tls_server_config:\n  cert_file: ''\n  key_file: server.key\n",
        "refused: missing one of cert or cert_file",
        "refused: cert_file is missing",
    ),
    Row(
        "web_config_noAuth_certPath_invalid.bad.yml",
        "tls_server_config:\n  cert_file: somefile\n  key_file: server.key\n",
        "refused: no such file",
        "refused: No such file or directory",
    ),
    Row(
        "web_config_noAuth_certPath_keyPath_empty.bad.yml",
        "tls_server_config:\n  cert_file: ''\n  key_file: ''\n  client_auth_type: x\n",
        "refused: missing one of cert or cert_file",
        "refused: cert_file is missing",
    ),
    Row(
        "web_config_noAuth_certPath_keyPath_invalid.bad.yml",
        "tls_server_config:\n  cert_file: somefile\n  key_file: somefile\n",
        "refused: no such file",
        "refused: No such file or directory",
    ),
    Row(
        "web_config_noAuth_cert_empty.bad.yml",
        "tls_server_config:\n  cert: ''\n  key_file: server.key\n",
        "refused: missing one of cert or cert_file",
        "refused: cert_file is missing (or give the PEM text as cert)",
    ),
    Row(
        "web_config_noAuth_inventedCiphers.bad.yml",
        IF_GIVEN + "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048]\n",
        "refused: unknown cipher",
        "refused: unknown cipher 'TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048'",
    ),
    Row(
        "web_config_noAuth_inventedCurves.bad.yml",
        IF_GIVEN + "  curve_preferences: [CurveP257]\n",
        "refused: unknown curve",
        "refused: unknown curve 'CurveP257'",
    ),
    Row(
        "web_config_noAuth_keyPath_empty.bad.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: ''\n",
        "refused: missing one of key or key_file",
        "refused: key_file is missing",
    ),
    Row(
        "web_config_noAuth_keyPath_invalid.bad.yml",
        "tls_server_config:\n  cert_file: server.cert\n  key_file: somefile\n",
        "refused: no such file",
        "refused: No such file or directory",
    ),
    Row(
        "web_config_noAuth_key_empty.bad.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key: ''\n",
        "refused: missing one of key or key_file",
        "refused: key_file is missing (or give the PEM text as key)",
    ),
    Row(
        "web_config_noAuth_noHTTP2.good.yml",
        IF_GIVEN
        + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n  max_version: TLS12\n"
        + "http_server_config:\n  http2: false\n",
        LOADS,
        LOADS,
    ),
    Row(
        "web_config_noAuth_noHTTP2Cipher.bad.yml",
        IF_GIVEN
        + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n  max_version: TLS12\n",
        "refused when serving: http2 needs TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 in the list",
        LOADS,
        "the exporter speaks HTTP/1.1 only, so HTTP/2's cipher requirement does not apply",
    ),
    Row(
        "web_config_noAuth_someCiphers.good.yml",
        IF_GIVEN
        + "  cipher_suites:\n"
        + "  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"
        + "  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
        + "  min_version: TLS12\n  max_version: TLS12\n",
        LOADS,
        LOADS,
    ),
    Row(
        "web_config_noAuth_someCiphers_noOrder.good.yml",
        IF_GIVEN
        + "  cipher_suites:\n"
        + "  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
        + "  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"
        + "  prefer_server_cipher_suites: false\n  min_version: TLS12\n  max_version: TLS12\n",
        LOADS,
        LOADS,
    ),
    Row(
        "web_config_noAuth_someCurves.good.yml",
        IF_GIVEN + "  min_version: TLS13\n  curve_preferences: [CurveP521]\n",
        LOADS,
        LOADS,
    ),
    Row(
        "web_config_noAuth_tlsInline.good.yml",
        "tls_server_config:\n  cert: {cert_pem}  key: {key_pem}",
        LOADS,
        LOADS,
    ),
    Row(
        "web_config_noAuth_wrongTLSVersion.bad.yml",
        IF_GIVEN + "  min_version: TLS111\n",
        "refused: unknown TLS version",
        "refused: 'TLS111' is not TLS12 or TLS13",
    ),
    Row(
        "web_config_rate_limiter_nonblocking.yaml",
        "rate_limit: {interval: 0, burst: 0}\n",
        LOADS + " (no limiter: the interval is 0)",
        LOADS,
        check=no_limit,
    ),
    Row(
        "web_config_rate_limiter_one_second.yaml",
        "rate_limit: {interval: 1s, burst: 0}\n",
        LOADS + " (a burst of 0: requests get 429 Too Many Requests)",
        LOADS + " (with a warning that every request but the probes gets 429)",
        check=refuses_everything,
    ),
    Row("web_config_users.good.yml", CERT_KEY + USERS, LOADS, LOADS, check=users_loaded),
    Row("web_config_users_noTLS.good.yml", USERS, LOADS, LOADS, check=users_loaded),
)


@pytest.fixture(scope="module")
def testdata(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with this test's certificates under the toolkit's file names."""
    directory = tmp_path_factory.mktemp("toolkit")
    files: dict[str, Path] = {
        "server.crt": pki.rsa_server.cert,
        "server.key": pki.rsa_server.key,
        "client_selfsigned.pem": pki.client_ca.cert,
        "client2_selfsigned.pem": pki.client_ca.cert,
    }
    for name, source in files.items():
        shutil.copy(source, directory / name)
    return directory


def observe(row: Row, pki: Pki, directory: Path) -> tuple[str, WebConfig | None]:
    def block(pair: KeyPair, which: str) -> str:
        pem = getattr(pair, which).read_text()
        return "|\n" + textwrap.indent(pem, "    ")

    text = row.yaml.replace("{cert_pem}", block(pki.rsa_server, "cert"))
    text = text.replace("{key_pem}", block(pki.rsa_server, "key"))
    path = directory / (row.file.split(" ")[0])
    path.write_text(text)
    try:
        return LOADS, load_web_config(str(path))
    except WebConfigError as error:
        message = str(error)
        assert "\n" not in message
        return f"refused: {message}", None


def kind(outcome: str) -> str:
    return "loads" if outcome.startswith(LOADS) else "refused"


@pytest.mark.parametrize("row", TABLE, ids=[row.file for row in TABLE])
def test_toolkit_testdata(row: Row, pki: Pki, testdata: Path) -> None:
    observed, config = observe(row, pki, testdata)
    table_line = f"{row.file}: toolkit {row.toolkit!r}, expected {row.expected!r}"
    assert kind(observed) == kind(row.expected), f"{table_line}, observed {observed!r}"
    if kind(row.expected) == "refused":
        assert row.expected.removeprefix("refused: ") in observed, table_line
    assert bool(row.why) == (kind(row.toolkit) != kind(row.expected)), (
        f"{row.file}: say why it differs from the toolkit, and only where it does"
    )
    if row.check is not None:
        assert config is not None
        row.check(config, pki, testdata)


def test_the_table_covers_every_toolkit_test_file() -> None:
    """The toolkit's web/testdata/ YAML files as of this writing (2026-07)."""
    toolkit_files = {
        "tls_config_noAuth.requireandverifyclientcert.good.yml",
        "tls_config_noAuth.requireanyclientcert.good.yml",
        "tls_config_noAuth.requireanyclientcertkeyinline.good.yml",
        "web_config_auth_clientCAs_invalid.bad.yml",
        "web_config_auth_clientCAs_missing.bad.yml",
        "web_config_auth_client_san.bad.yaml",
        "web_config_auth_client_san.good.yaml",
        "web_config_auth_user_list_invalid.bad.yml",
        "web_config_empty.yml",
        "web_config_headers.good.yml",
        "web_config_headers_content_type_options.bad.yml",
        "web_config_headers_extra_header.bad.yml",
        "web_config_headers_frame_options.bad.yml",
        "web_config_junk.yml",
        "web_config_junk_key.yml",
        "web_config_noAuth.bad.yml",
        "web_config_noAuth.good.blocking.yml",
        "web_config_noAuth.good.yml",
        "web_config_noAuth_allCiphers.good.yml",
        "web_config_noAuth_allCurves.good.yml",
        "web_config_noAuth_certPath_empty.bad.yml",
        "web_config_noAuth_certPath_invalid.bad.yml",
        "web_config_noAuth_certPath_keyPath_empty.bad.yml",
        "web_config_noAuth_certPath_keyPath_invalid.bad.yml",
        "web_config_noAuth_cert_empty.bad.yml",
        "web_config_noAuth_inventedCiphers.bad.yml",
        "web_config_noAuth_inventedCurves.bad.yml",
        "web_config_noAuth_keyPath_empty.bad.yml",
        "web_config_noAuth_keyPath_invalid.bad.yml",
        "web_config_noAuth_key_empty.bad.yml",
        "web_config_noAuth_noHTTP2.good.yml",
        "web_config_noAuth_noHTTP2Cipher.bad.yml",
        "web_config_noAuth_someCiphers.good.yml",
        "web_config_noAuth_someCiphers_noOrder.good.yml",
        "web_config_noAuth_someCurves.good.yml",
        "web_config_noAuth_tlsInline.good.yml",
        "web_config_noAuth_wrongTLSVersion.bad.yml",
        "web_config_rate_limiter_nonblocking.yaml",
        "web_config_rate_limiter_one_second.yaml",
        "web_config_users.good.yml",
        "web_config_users_noTLS.good.yml",
    }
    assert toolkit_files <= {row.file for row in TABLE}
