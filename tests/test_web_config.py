"""The web config file: what loads, every way it can be wrong, basic auth and re-reading."""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

import bcrypt
import pytest

from gpu_exporter.serving.http import LiveWebConfig
from gpu_exporter.serving.web_config import WebConfig, WebConfigError, load_web_config
from tests.support.certs import Pki
from tests.support.clock import FakeClock

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()


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
        ("rate_limit:\n  burst: 1\n", "rate_limit is not supported"),
        ("tls_server_config:\n  cipher_suites: [x]\n", "cipher_suites is not supported"),
        ("tls_server_config:\n  key_file: k\n", "tls_server_config: cert_file is missing"),
        ("tls_server_config:\n  cert_file: c\n", "tls_server_config: key_file is missing"),
        ("tls_server_config:\n  cert_file: 5\n", "cert_file must be a string, not a number"),
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
        ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice: not a bcrypt hash"),
        ("basic_auth_users:\n  alice: 42\n", "basic_auth_users.alice: must be a bcrypt hash"),
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
