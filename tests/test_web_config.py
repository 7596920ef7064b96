"""The web config file: what loads, every way it can be wrong, basic auth and re-reading."""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

import bcrypt
import pytest

from gpu_exporter.serving.http import LiveWebConfig
from gpu_exporter.serving.rate_limit import RateLimit
from gpu_exporter.serving.web_config import WebConfig, WebConfigError, load_web_config
from tests.support.certs import Pki
from tests.support.clock import FakeClock
from tests.support.hostile_web_configs import CORPUS, Hostile

# a fixed salt: the hash appears in test ids, which every pytest-xdist worker must
# collect alike (a random salt made each worker's ids differ)
HASH = bcrypt.hashpw(b"secret", b"$2b$04$gpuexporterTestsSalt0u").decode()


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return str(path)


def error_of(path: str) -> str:
    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"web config {path}: ")
    return message


def test_no_file_means_plain_http_without_auth() -> None:
    loaded = load_web_config(None)
    assert loaded == WebConfig()
    assert loaded.ssl_context is None and loaded.auth is None and not loaded.headers


def test_an_empty_file_is_valid_and_configures_nothing(tmp_path: Path) -> None:
    loaded = load_web_config(config(tmp_path, ""))
    assert loaded.tls is None and loaded.auth is None and not loaded.headers


def test_full_config_with_relative_paths(pki: Pki, tmp_path: Path) -> None:
    for pair, name in ((pki.server, "server"), (pki.client_ca, "ca")):
        (tmp_path / f"{name}.crt").write_bytes(pair.cert.read_bytes())
    (tmp_path / "server.key").write_bytes(pki.server.key.read_bytes())
    path = config(
        tmp_path,
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_ca_file: ca.crt\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  min_version: TLS13\n"
        "http_server_config:\n"
        "  http2: true\n"
        "  headers:\n"
        "    x-frame-options: SAMEORIGIN\n"
        "    Content-Security-Policy: default-src 'none'\n"
        f"basic_auth_users:\n  alice: '{HASH}'\n",
    )
    loaded = load_web_config(path)
    assert loaded.tls is not None
    assert loaded.tls.cert_file == str(tmp_path / "server.crt")
    assert loaded.tls.client_ca_file == str(tmp_path / "ca.crt")
    context = loaded.ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert loaded.headers == {
        "X-Frame-Options": "SAMEORIGIN",
        "Content-Security-Policy": "default-src 'none'",
    }
    assert set(loaded.users) == {"alice"}
    assert loaded.watched_files == (
        path,
        str(tmp_path / "server.crt"),
        str(tmp_path / "server.key"),
        str(tmp_path / "ca.crt"),
    )


@pytest.mark.parametrize(
    ("auth", "mode"),
    [
        ("NoClientCert", ssl.CERT_NONE),
        ("RequestClientCert", ssl.CERT_NONE),
        ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
        ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED),
    ],
)
def test_client_auth_types(auth: str, mode: ssl.VerifyMode, pki: Pki, tmp_path: Path) -> None:
    ca = f"  client_ca_file: {pki.client_ca.cert}\n" if mode != ssl.CERT_NONE else ""
    path = config(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
        f"  client_auth_type: {auth}\n{ca}",
    )
    context = load_web_config(path).ssl_context
    assert context is not None
    assert context.verify_mode == mode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2]\n", "the file must be a mapping, not a list"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n: x: y\n", "invalid YAML: line 4"),
        ("tls_server_confg: {}\n", "unknown key 'tls_server_confg'"),
        ("tls_server_config:\n  certfile: x\n", "tls_server_config: unknown key 'certfile'"),
        ("http_server_config:\n  header: {}\n", "http_server_config: unknown key 'header'"),
        ("rate_limit:\n  burst: 1\n  period: 1s\n", "rate_limit: unknown key 'period'"),
        (
            "tls_server_config:\n  cipher_suites: [x]\n",
            "tls_server_config: cipher_suites set without a certificate",
        ),
        ("tls_server_config:\n  key_file: k\n", "tls_server_config: cert_file is missing"),
        ("tls_server_config:\n  cert_file: c\n", "tls_server_config: key_file is missing"),
        ("tls_server_config:\n  cert_file: [5]\n", "cert_file must be a string, not a list"),
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
        ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice: not a bcrypt hash"),
        ("basic_auth_users:\n  alice: [42]\n", "basic_auth_users.alice: must be a bcrypt hash"),
        ("basic_auth_users:\n  alice: 42\n", "basic_auth_users.alice: not a bcrypt hash"),
        (f"basic_auth_users:\n  'a:b': '{HASH}'\n", "must not contain ':'"),
        (
            "basic_auth_users:\n  alice: '$2b$99$" + "a" * 53 + "'\n",
            "basic_auth_users.alice: not a bcrypt hash",
        ),
        (
            "http_server_config:\n  headers:\n    Content-Length: '1'\n",
            "'Content-Length' can not be configured",
        ),
        (
            "http_server_config:\n  headers:\n    Set-Cookie: a=b\n",
            "'Set-Cookie' can not be configured",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "X-Frame-Options: 'allow' is not one of deny, sameorigin",
        ),
        (
            "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
            "'sniff' is not one of nosniff",
        ),
        (
            'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: a=b"\n',
            "X-XSS-Protection: must be a single line",
        ),
        ("http_server_config:\n  http2: maybe\n", "http2 must be true or false"),
    ],
)
def test_errors_name_the_file_and_the_problem(text: str, expected: str, tmp_path: Path) -> None:
    assert expected in error_of(config(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read: No such file or directory" in error_of(str(tmp_path / "nope.yml"))


def tls_text(cert: Path | str, key: Path | str, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n{extra}"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("  client_auth_type: Sometimes\n", "'Sometimes' is not one of NoClientCert"),
        ("  client_auth_type: RequireAnyClientCert\n", "RequireAnyClientCert is not supported"),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "RequireAndVerifyClientCert needs client_ca_file",
        ),
        ("  client_ca_file: {ca}\n", "client_ca_file is set but client_auth_type NoClientCert"),
        ("  min_version: TLS10\n", "TLS10 is not supported; use TLS12 or TLS13"),
        ("  min_version: SSL3\n", "'SSL3' is not TLS12 or TLS13"),
        (
            "  min_version: TLS13\n  max_version: TLS12\n",
            "max_version TLS12 is below min_version TLS13",
        ),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {key}\n",
            "client_ca_file {key}: no usable PEM CA certificate",
        ),
    ],
)
def test_tls_errors(extra: str, expected: str, pki: Pki, tmp_path: Path) -> None:
    names = {"ca": pki.client_ca.cert, "key": pki.server.key}
    text = tls_text(pki.server.cert, pki.server.key, extra.format(**names))
    assert expected.format(**names) in error_of(config(tmp_path, text))


def test_unreadable_or_wrong_certificate_and_key_files(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "missing.crt"
    assert f"cert_file {missing}: No such file" in error_of(
        config(tmp_path, tls_text(missing, pki.server.key))
    )
    assert f"cert_file {pki.server.key}: not a PEM certificate" in error_of(
        config(tmp_path, tls_text(pki.server.key, pki.server.key))
    )
    assert f"key_file {pki.server.cert}: not a usable PEM private key" in error_of(
        config(tmp_path, tls_text(pki.server.cert, pki.server.cert))
    )
    assert f"key_file {pki.client.key} does not match cert_file {pki.server.cert}" in error_of(
        config(tmp_path, tls_text(pki.server.cert, pki.client.key))
    )
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.key"
        locked.write_bytes(pki.server.key.read_bytes())
        locked.chmod(0)
        assert "key_file" in error_of(config(tmp_path, tls_text(pki.server.cert, locked)))


def test_an_encrypted_key_is_refused_without_prompting(pki: Pki, tmp_path: Path) -> None:
    import subprocess

    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(pki.server.key), "-aes256", "-passout", "pass:x"]
        + ["-out", str(encrypted)],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    assert "the key is encrypted" in error_of(
        config(tmp_path, tls_text(pki.server.cert, encrypted))
    )


# --- re-reading ------------------------------------------------------------------------


def test_live_config_rereads_a_changed_file_at_most_once_a_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = config(tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    clock = FakeClock()
    live = LiveWebConfig(load_web_config(path), clock=clock.monotonic)
    assert live.current().headers == {"X-Frame-Options": "deny"}

    config(tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
    clock.now += 0.5
    assert live.current().headers == {"X-Frame-Options": "deny"}  # not looked at yet
    clock.now += 0.6
    assert live.current().headers == {"X-Frame-Options": "sameorigin"}

    caplog.set_level(logging.ERROR)
    config(tmp_path, "http_server_config: [\n")
    for _ in range(5):
        clock.now += 1.1
        assert live.current().headers == {"X-Frame-Options": "sameorigin"}
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "invalid YAML" in errors[0].__dict__["error"]

    # an explicit reload (SIGHUP) reports the broken file again and keeps the old settings
    assert live.reload() is False
    config(tmp_path, "")
    assert live.reload() is True
    assert live.current().headers == {}


def test_live_config_switches_to_another_file(tmp_path: Path) -> None:
    live = LiveWebConfig(load_web_config(None))
    other = config(tmp_path, f"basic_auth_users:\n  alice: '{HASH}'\n")
    assert live.reload(other) is True
    assert live.current().auth is not None


# --- hostile files ---------------------------------------------------------------------


@pytest.mark.parametrize("hostile", CORPUS, ids=[h.name for h in CORPUS])
def test_hostile_files_end_in_one_clear_line(hostile: Hostile, pki: Pki, tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_bytes(hostile.render(pki))
    message = error_of(str(path))
    assert hostile.expected in message
    assert len(message) <= 400


def test_a_utf16_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    text = "\ufeffhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    path.write_bytes(text.encode("utf-16-be"))
    assert load_web_config(str(path)).headers == {"X-Frame-Options": "deny"}


def test_anchors_without_aliases_and_inline_merges_are_fine(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        "http_server_config: &http\n  <<: {http2: false}\n  headers:\n    X-Frame-Options: deny\n",
    )
    assert load_web_config(path).headers == {"X-Frame-Options": "deny"}


# --- scalars as Go reads them ----------------------------------------------------------


def test_header_values_are_the_text_as_written_as_go_reads_them(tmp_path: Path) -> None:
    """exporter-toolkit's web_config_headers.good.yml has `X-XSS-Protection: 1`, a YAML
    integer; Go decodes it into a string field as "1"."""
    path = config(
        tmp_path,
        "http_server_config:\n  headers:\n"
        "    X-XSS-Protection: 1\n"
        "    Strict-Transport-Security: 0x10\n"
        "    Content-Security-Policy: yes\n",
    )
    assert load_web_config(path).headers == {
        "X-XSS-Protection": "1",
        "Strict-Transport-Security": "0x10",
        "Content-Security-Policy": "yes",
    }


def test_a_numeric_user_name_or_path_is_its_text(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "2024").write_bytes(pki.server.cert.read_bytes())
    path = config(
        tmp_path,
        f"tls_server_config:\n  cert_file: 2024\n  key_file: {pki.server.key}\n"
        f"basic_auth_users:\n  1234: '{HASH}'\n",
    )
    loaded = load_web_config(path)
    assert loaded.tls is not None and loaded.tls.cert_file == str(tmp_path / "2024")
    assert set(loaded.users) == {"1234"}


@pytest.mark.parametrize("text", ["yes", "off", "true", "False"])
def test_booleans_take_yaml_booleans(text: str, tmp_path: Path) -> None:
    load_web_config(config(tmp_path, f"http_server_config:\n  http2: {text}\n"))
    quoted = config(tmp_path, f"http_server_config:\n  http2: '{text}'\n")
    assert "http2 must be true or false, not a string" in error_of(quoted)


@pytest.mark.parametrize(
    "value",
    ["default-src \u4e2d", "caf\u00e9", "a\u0007b", "a\u007fb", "\u2028x"],
    ids=["cjk", "latin-1", "bell", "delete", "line-separator"],
)
def test_header_values_that_cannot_be_sent_are_refused_at_load(value: str, tmp_path: Path) -> None:
    """Such a value used to load, and then every response failed as it was written."""
    path = config(
        tmp_path,
        f"http_server_config:\n  headers:\n    Content-Security-Policy: {value!r}\n".replace(
            "'", '"'
        ),
    )
    assert "Content-Security-Policy: " in error_of(path)
    assert "can not be sent in an HTTP header; use printable ASCII only" in error_of(path)


# --- TLS features ----------------------------------------------------------------------


def test_inline_certificate_key_and_client_ca(pki: Pki, tmp_path: Path) -> None:
    def block(pem: Path) -> str:
        return "|\n" + "".join(f"    {line}\n" for line in pem.read_text().splitlines())

    path = config(
        tmp_path,
        f"tls_server_config:\n  cert: {block(pki.server.cert)}  key: {block(pki.server.key)}"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca: {block(pki.client_ca.cert)}",
    )
    loaded = load_web_config(path)
    assert loaded.tls is not None and loaded.ssl_context is not None
    assert loaded.tls.cert_file is None and loaded.tls.key_file is None
    assert loaded.watched_files == (path,)  # inline PEM is no file to watch
    assert loaded.ssl_context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("  cert: x\n", "give cert_file or cert, not both"),
        ("  key: x\n", "give key_file or key, not both"),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n"
            "  client_ca: x\n",
            "give client_ca_file or client_ca, not both",
        ),
        ("  client_auth_type: RequireClientCert\n", "RequireAnyClientCert is not supported"),
        ("  client_allowed_sans: [a]\n", "client_allowed_sans needs client_auth_type"),
        ("  client_auth_type: RequestClientCert\n  client_allowed_sans: [a]\n", "not Request"),
        ("  client_auth_type: RequestClientCert\n  client_ca_file: {ca}\n", "never verifies"),
        ("  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048]\n", "unknown cipher"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "only TLS 1.3 suites"),
        ("  curve_preferences: [CurveP257]\n", "unknown curve 'CurveP257'"),
        ("  min_version: TLS111\n", "'TLS111' is not TLS12 or TLS13"),
    ],
)
def test_tls_feature_errors(extra: str, expected: str, pki: Pki, tmp_path: Path) -> None:
    text = tls_text(pki.server.cert, pki.server.key, extra.format(ca=pki.client_ca.cert))
    assert expected in error_of(config(tmp_path, text))


def test_ciphers_curves_and_sans_are_kept(pki: Pki, tmp_path: Path) -> None:
    path = config(
        tmp_path,
        tls_text(
            pki.server.cert,
            pki.server.key,
            "  client_auth_type: RequireAndVerifyClientCert\n"
            f"  client_ca_file: {pki.client_ca.cert}\n"
            "  client_allowed_sans: [prometheus, 10.0.0.1]\n"
            "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
            "  curve_preferences: [X25519]\n",
        ),
    )
    loaded = load_web_config(path)
    assert loaded.tls is not None
    assert loaded.tls.client_allowed_sans == ("prometheus", "10.0.0.1")
    assert loaded.tls.cipher_suites == (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "TLS_AES_128_GCM_SHA256",
    )
    assert loaded.tls.curve == "X25519"
    assert loaded.notes == ()


def test_a_list_of_curves_uses_the_first_and_says_so(pki: Pki, tmp_path: Path) -> None:
    text = tls_text(
        pki.server.cert, pki.server.key, "  curve_preferences: [CurveP256, CurveP384, X25519]\n"
    )
    loaded = load_web_config(config(tmp_path, text))
    assert loaded.tls is not None and loaded.tls.curve == "CurveP256"
    assert any("only CurveP256 (the first listed) is used" in note for note in loaded.notes)


def test_verify_client_cert_if_given_without_a_ca_uses_the_system_roots(
    pki: Pki, tmp_path: Path
) -> None:
    text = tls_text(
        pki.server.cert, pki.server.key, "  client_auth_type: VerifyClientCertIfGiven\n"
    )
    loaded = load_web_config(config(tmp_path, text))
    assert loaded.ssl_context is not None
    assert loaded.ssl_context.verify_mode == ssl.CERT_OPTIONAL
    assert any("system's CA certificates" in note for note in loaded.notes)


# --- rate limit ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("rate_limit:\n  interval: 1s\n  burst: 10\n", RateLimit(1.0, 10)),
        ("rate_limit:\n  interval: 250ms\n  burst: 1\n", RateLimit(0.25, 1)),
        ("rate_limit:\n  interval: 1m\n", RateLimit(60.0, 0)),
        ("rate_limit:\n  interval: 0\n  burst: 0\n", None),
        ("rate_limit:\n  burst: 5\n", None),
        ("rate_limit: {}\n", None),
    ],
)
def test_rate_limit(text: str, limit: RateLimit | None, tmp_path: Path) -> None:
    loaded = load_web_config(config(tmp_path, text))
    assert loaded.rate_limit == limit
    assert (loaded.limiter is None) == (limit is None)


def test_a_burst_of_zero_is_honoured_with_a_warning(tmp_path: Path) -> None:
    loaded = load_web_config(config(tmp_path, "rate_limit:\n  interval: 1s\n  burst: 0\n"))
    assert loaded.limiter is not None and not loaded.limiter.allow()
    assert any("every request but /livez and /healthz gets 429" in n for n in loaded.notes)


def test_a_reread_config_keeps_the_bucket_when_the_limit_is_the_same(tmp_path: Path) -> None:
    path = config(
        tmp_path, f"rate_limit:\n  interval: 1h\n  burst: 1\nbasic_auth_users:\n  a: '{HASH}'\n"
    )
    old = load_web_config(path)
    assert old.limiter is not None and old.limiter.allow()
    again = load_web_config(path).carry_over(old)
    assert again.limiter is old.limiter  # not refilled by a re-read
    config(tmp_path, "rate_limit:\n  interval: 1h\n  burst: 2\n")
    changed = load_web_config(path).carry_over(old)
    assert changed.limiter is not old.limiter and changed.limiter is not None
    assert changed.limiter.allow()
