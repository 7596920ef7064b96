"""The server's TLS context from the web config's `tls_server_config`, in Python's ssl terms.

exporter-toolkit names ciphers and curves as Go does; this module maps them to OpenSSL:

- `cipher_suites`: Go's names (`tls.CipherSuites()`, e.g.
  `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`) map to OpenSSL's (`ECDHE-RSA-AES128-GCM-SHA256`)
  and restrict TLS 1.2, in the order given when `prefer_server_cipher_suites` is on. TLS
  1.3 suites are accepted and ignored: they cannot be configured, in Go either.
- `curve_preferences`: Python's ssl can offer one curve only (`set_ecdh_curve`), so the
  first one listed is used, for TLS 1.2 and 1.3 alike. Clients that support none of the
  listed curves fail the handshake, as in Go; a client that supports a later one but not
  the first fails too, where Go would pick the later one.
- `cert` and `key` given inline: Python's ssl reads certificates only from files, so the
  PEM text is handed to it through an anonymous in-memory file (Linux memfd, never on a
  disk, readable only by this process), or where there is none a 0600 temporary file
  that is removed at once.
- `client_allowed_sans`: checked after the handshake (Python's ssl has no verification
  callback) by `client_allowed`, with exporter-toolkit's rule.

`build_context` also runs a TLS handshake with itself in memory for each allowed TLS
version, so settings no client could ever complete (an ECDSA certificate with only RSA
cipher suites, say) are refused at load rather than failing every connection.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from gpu_exporter.serving.tls_settings import GO_CIPHERS, GO_CURVES, Pem, TlsError, TlsSettings

TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_VERIFY_MODES = {
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


def verify_mode(settings: TlsSettings) -> ssl.VerifyMode:
    """How the server checks client certificates under `settings.client_auth_type`."""
    return _VERIFY_MODES.get(settings.client_auth_type, ssl.CERT_NONE)


def build_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server context for `settings`; raises TlsError with one line."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[settings.min_version]
    if settings.max_version is not None:
        context.maximum_version = TLS_VERSIONS[settings.max_version]
    if settings.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    _set_ciphers(context, settings)
    if settings.curve is not None:
        context.set_ecdh_curve(GO_CURVES[settings.curve])
    _load_pair(context, settings.cert, settings.key)
    if settings.client_ca is not None:
        _load_client_ca(context, settings.client_ca)
    elif verify_mode(settings) != ssl.CERT_NONE:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # as Go: the system roots
    for version in _allowed_versions(settings):
        problem = _self_handshake(context, version)
        if problem is not None:
            raise TlsError(
                f"a {version} handshake with these settings fails ({problem}); check "
                "cipher_suites and curve_preferences against the certificate's key type"
                + (", or set min_version: TLS13" if version == "TLS12" else "")
            )
    context.verify_mode = verify_mode(settings)
    return context


def _allowed_versions(settings: TlsSettings) -> list[str]:
    low = TLS_VERSIONS[settings.min_version]
    high = TLS_VERSIONS[settings.max_version or "TLS13"]
    return [name for name, version in TLS_VERSIONS.items() if low <= version <= high]


def _set_ciphers(context: ssl.SSLContext, settings: TlsSettings) -> None:
    wanted = [GO_CIPHERS[name] for name in settings.cipher_suites if name in GO_CIPHERS]
    if not wanted:
        if settings.cipher_suites and settings.min_version == "TLS12":
            raise TlsError(
                "cipher_suites lists only TLS 1.3 suites, which cannot be configured (in Go "
                "either); list the TLS 1.2 suites to allow, or set min_version: TLS13"
            )
        return
    try:
        context.set_ciphers(":".join(wanted))
    except ssl.SSLError:
        available: set[str] = set()
    else:
        available = {cipher["name"] for cipher in context.get_ciphers()}
    missing = [name for name in settings.cipher_suites if GO_CIPHERS.get(name, "") not in available]
    missing = [name for name in missing if name in GO_CIPHERS]
    if missing:
        raise TlsError(
            f"cipher_suites: {', '.join(missing)} not available in {ssl.OPENSSL_VERSION}"
        )


@contextmanager
def pem_path(text: str) -> Iterator[str]:
    """A file name that reads as `text` while the block runs, for ssl calls that need one.

    Linux: an anonymous in-memory file (memfd), reached as /proc/self/fd/N; it is never
    on a disk and only this process can open it. Elsewhere: a temporary file created
    0600 and removed when the block ends.
    """
    data = text.encode("utf-8", "surrogateescape")
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd_create("gpu-exporter-pem", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:
                handle.write(data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="gpu-exporter-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        yield path
    finally:
        os.unlink(path)


@contextmanager
def _readable(pem: Pem) -> Iterator[str]:
    if pem.text is not None:
        with pem_path(pem.text) as path:
            yield path
        return
    assert pem.path is not None
    try:
        with open(pem.path, "rb") as handle:
            handle.read(1)
    except OSError as error:
        raise TlsError(f"{pem.name}: {error.strerror or error}") from None
    yield pem.path


def _load_pair(context: ssl.SSLContext, cert: Pem, key: Pem) -> None:
    with _readable(cert) as cert_path, _readable(key) as key_path:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            probe.load_verify_locations(cafile=cert_path)
        except ssl.SSLError as error:
            raise TlsError(f"{cert.name}: not a PEM certificate ({_reason(error)})") from None

        def encrypted() -> bytes:
            raise TlsError(f"{key.name}: the key is encrypted; give an unencrypted key")

        try:
            context.load_cert_chain(cert_path, key_path, password=encrypted)
        except ssl.SSLError as error:
            if "KEY_VALUES_MISMATCH" in str(error):
                raise TlsError(f"{key.name} does not match {cert.name}") from None
            raise TlsError(f"{key.name}: not a usable PEM private key ({_reason(error)})") from None


def _load_client_ca(context: ssl.SSLContext, ca: Pem) -> None:
    with _readable(ca) as path:
        try:
            context.load_verify_locations(cafile=path)
        except ssl.SSLError as error:
            raise TlsError(f"{ca.name}: no usable PEM CA certificate ({_reason(error)})") from None


def _self_handshake(server: ssl.SSLContext, version: str) -> str | None:
    """Why a handshake of `server` with a client that accepts anything fails, or None."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.set_ciphers("ALL:@SECLEVEL=0")
    client.minimum_version = client.maximum_version = TLS_VERSIONS[version]
    server.verify_mode = ssl.CERT_NONE  # the client has no certificate; set after this
    try:
        handshake_in_memory(server, client)
    except ssl.SSLError as error:
        return _reason(error)
    return None


def handshake_in_memory(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str | None = None
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake between two contexts through memory buffers: no socket, no waiting.

    Returns the server's and the client's end; raises ssl.SSLError when it fails.
    """
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_end = server.wrap_bio(server_in, server_out, server_side=True)
    client_end = client.wrap_bio(client_in, client_out, server_hostname=server_hostname)
    ends = ((client_end, client_out, server_in), (server_end, server_out, client_in))
    done = [False, False]
    for _ in range(8):  # a handshake takes at most 3 round trips
        for index, (end, outgoing, peer_incoming) in enumerate(ends):
            if not done[index]:
                try:
                    end.do_handshake()
                    done[index] = True
                except ssl.SSLWantReadError:
                    pass
            peer_incoming.write(outgoing.read())
        if all(done):
            return server_end, client_end
    raise ssl.SSLError("the handshake did not finish")


def _reason(error: ssl.SSLError) -> str:
    return str(error.reason or error.strerror or error).replace("\n", " ")
