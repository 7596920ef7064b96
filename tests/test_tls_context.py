"""The TLS context from the web config: Go cipher and curve names, inline PEM, client SANs.

Handshakes run in memory (ssl.MemoryBIO) between the server context the exporter would
serve with and a client context: no sockets, no timing.
"""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path

import pytest

from gpu_exporter.serving import tls_context
from gpu_exporter.serving.tls_context import build_context, pem_path
from gpu_exporter.serving.tls_settings import (
    GO_CIPHERS,
    GO_CURVES,
    Pem,
    TlsError,
    TlsSettings,
    client_allowed,
)
from tests.support.certs import KeyPair, Pki, issue
from tests.support.tls_handshake import Handshake, client


def settings(pair: KeyPair, **changes: object) -> TlsSettings:
    base = TlsSettings(
        cert=Pem("cert_file", path=str(pair.cert)), key=Pem("key_file", path=str(pair.key))
    )
    return TlsSettings(**{**base.__dict__, **changes})  # type: ignore[arg-type]


T12, T13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3


def test_every_go_cipher_name_maps_to_a_cipher_this_openssl_has() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers(":".join(GO_CIPHERS.values()))
    assert set(GO_CIPHERS.values()) <= {c["name"] for c in context.get_ciphers()}


def test_cipher_suites_restrict_tls12_in_the_order_given(pki: Pki) -> None:
    """The toolkit's someCiphers case: an RSA certificate, two ECDHE-RSA GCM suites."""
    server = build_context(
        settings(
            pki.rsa_server,
            cipher_suites=(
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ),
            max_version="TLS12",
        )
    )
    both = "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256"
    assert Handshake(server, client(pki.ca.cert, ciphers=both)).cipher == (
        "ECDHE-RSA-AES128-GCM-SHA256"  # the server's order wins
    )
    with pytest.raises(ssl.SSLError):  # no common cipher
        Handshake(server, client(pki.ca.cert, ciphers="ECDHE-RSA-AES256-SHA"))


def test_without_server_preference_the_client_chooses(pki: Pki) -> None:
    server = build_context(
        settings(
            pki.rsa_server,
            cipher_suites=(
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ),
            prefer_server_cipher_suites=False,
            max_version="TLS12",
        )
    )
    first = "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384"
    assert Handshake(server, client(pki.ca.cert, ciphers=first)).cipher == (
        "ECDHE-RSA-AES128-GCM-SHA256"
    )


def test_tls13_suites_are_accepted_and_tls13_is_unaffected(pki: Pki) -> None:
    server = build_context(
        settings(
            pki.server,
            cipher_suites=("TLS_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
        )
    )
    assert Handshake(server, client(pki.ca.cert, version=T13)).cipher.startswith("TLS_")
    assert Handshake(server, client(pki.ca.cert, version=T12)).cipher == (
        "ECDHE-ECDSA-AES128-GCM-SHA256"
    )


def test_only_tls13_suites_need_min_version_tls13(pki: Pki) -> None:
    only13 = ("TLS_AES_256_GCM_SHA384",)
    with pytest.raises(TlsError, match=r"only TLS 1\.3 suites"):
        build_context(settings(pki.server, cipher_suites=only13))
    server = build_context(settings(pki.server, cipher_suites=only13, min_version="TLS13"))
    Handshake(server, client(pki.ca.cert))


def test_settings_no_client_can_use_are_refused(pki: Pki) -> None:
    """An ECDSA certificate with only RSA suites: Go would load it and fail every TLS 1.2
    handshake; here the load fails, with one line that says what to check."""
    with pytest.raises(TlsError, match="a TLS12 handshake with these settings fails") as caught:
        build_context(
            settings(pki.server, cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",))
        )
    assert "\n" not in str(caught.value)
    # with TLS 1.3 only, the TLS 1.2 suites do not matter
    build_context(
        settings(
            pki.server,
            cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",),
            min_version="TLS13",
        )
    )


@pytest.mark.parametrize("curve", sorted(GO_CURVES))
def test_the_one_curve_is_the_only_one_offered(curve: str, pki: Pki) -> None:
    """The toolkit's someCurves case (TLS 1.3, one curve): a client with that curve gets
    in, a client with another one does not."""
    server = build_context(settings(pki.server, curve=curve, min_version="TLS13"))
    Handshake(server, client(pki.ca.cert, curve=GO_CURVES[curve]))
    other = "secp384r1" if curve != "CurveP384" else "prime256v1"
    with pytest.raises(ssl.SSLError):
        Handshake(server, client(pki.ca.cert, curve=other))


def test_the_one_curve_holds_for_tls12_too(pki: Pki) -> None:
    server = build_context(settings(pki.server, curve="CurveP521", max_version="TLS12"))
    Handshake(server, client(pki.ca.cert))  # offers P-521 among others
    with pytest.raises(ssl.SSLError):
        Handshake(server, client(pki.ca.cert, curve="secp384r1"))


def test_inline_certificate_and_key(pki: Pki) -> None:
    server = build_context(
        TlsSettings(
            cert=Pem("cert", text=pki.server.cert.read_text()),
            key=Pem("key", text=pki.server.key.read_text()),
        )
    )
    Handshake(server, client(pki.ca.cert))
    with pytest.raises(TlsError, match=r"^key \(inline\): not a usable PEM private key"):
        build_context(
            TlsSettings(
                cert=Pem("cert", text=pki.server.cert.read_text()), key=Pem("key", text="junk")
            )
        )
    with pytest.raises(TlsError, match=r"^key \(inline\) does not match cert \(inline\)"):
        build_context(
            TlsSettings(
                cert=Pem("cert", text=pki.server.cert.read_text()),
                key=Pem("key", text=pki.client.key.read_text()),
            )
        )


def test_inline_pem_lives_in_memory_and_is_gone_after(tmp_path: Path) -> None:
    with pem_path("secret key material") as path:
        assert path.startswith("/proc/self/fd/")
        assert Path(path).read_text() == "secret key material"
        fd = int(path.rsplit("/", 1)[1])
        assert os.readlink(path).startswith("/memfd:")  # not a file on any disk
    with pytest.raises(OSError):
        os.fstat(fd)


def test_inline_pem_without_memfd_is_a_private_file_removed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(tls_context.os, "memfd_create")
    monkeypatch.setattr(tls_context.tempfile, "tempdir", str(tmp_path))
    with pem_path("secret key material") as path:
        assert Path(path).parent == tmp_path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert Path(path).read_text() == "secret key material"
    assert list(tmp_path.iterdir()) == []


def test_client_ca_verifies_and_system_roots_serve_verify_if_given(pki: Pki) -> None:
    mutual = build_context(
        settings(
            pki.server,
            client_ca=Pem("client_ca", text=pki.client_ca.cert.read_text()),
            client_auth_type="RequireAndVerifyClientCert",
        )
    )
    assert mutual.verify_mode == ssl.CERT_REQUIRED
    Handshake(mutual, client(pki.ca.cert, cert=pki.client, version=T12))
    with pytest.raises(ssl.SSLError):
        Handshake(mutual, client(pki.ca.cert, cert=pki.rogue_client, version=T12))
    optional = build_context(settings(pki.server, client_auth_type="VerifyClientCertIfGiven"))
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    Handshake(optional, client(pki.ca.cert))  # no certificate: admitted


@pytest.mark.parametrize(
    ("sans", "allowed", "expected"),
    [
        ((("DNS", "prometheus"),), ("prometheus",), True),
        ((("DNS", "prometheus"),), ("Prometheus",), False),  # exact, as Go compares
        ((("DNS", "a"), ("email", "ops@example.com")), ("ops@example.com",), True),
        ((("IP Address", "10.0.0.1"),), ("10.0.0.1",), True),
        ((("IP Address", "2001:DB8:0:0:0:0:0:1\n"),), ("2001:db8::1",), True),  # Go's form
        ((("URI", "spiffe://cluster/prometheus"),), ("spiffe://cluster/prometheus",), True),
        ((("DirName", "x"),), ("x",), False),
        ((), ("prometheus",), False),
    ],
)
def test_client_allowed_sans_rule(
    sans: tuple[tuple[str, str], ...], allowed: tuple[str, ...], expected: bool
) -> None:
    assert client_allowed({"subjectAltName": sans}, allowed) is expected


def test_no_certificate_is_never_allowed() -> None:
    assert client_allowed(None, ("prometheus",)) is False
    assert client_allowed({}, ("prometheus",)) is False


def test_sans_as_python_reads_them_from_a_real_certificate(pki: Pki, tmp_path: Path) -> None:
    many = issue(
        pki.client_ca,
        tmp_path,
        "many",
        server=False,
        san="DNS:one, IP:10.1.2.3, IP:2001:db8::7, email:ops@example.com, URI:spiffe://c/p",
    )
    mutual = build_context(
        settings(
            pki.server,
            client_ca=Pem("client_ca_file", path=str(pki.client_ca.cert)),
            client_auth_type="RequireAndVerifyClientCert",
        )
    )
    peer = Handshake(mutual, client(pki.ca.cert, cert=many, version=T12)).server.getpeercert()
    for name in ("one", "10.1.2.3", "2001:db8::7", "ops@example.com", "spiffe://c/p"):
        assert client_allowed(peer, (name,)), name
    assert not client_allowed(peer, ("two", "10.1.2.4"))
