"""Certificates made at test time with the `openssl` command (P-256 keys, or RSA 2048 where
asked; valid one day)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        pytest.skip("the openssl command is needed to make test certificates")
    return path


def _run(*args: str | Path) -> None:
    subprocess.run([openssl(), *map(str, args)], check=True, capture_output=True, timeout=30)


def _key(path: Path, *, rsa: bool = False) -> None:
    if rsa:
        _run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", path)
    else:
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


def make_ca(directory: Path, name: str) -> KeyPair:
    """A self-signed certificate authority."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    _key(pair.key)
    ext = directory / f"{name}.ext"
    ext.write_text(
        "[v3]\n"
        "basicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\n"
    )
    _run(
        "req", "-x509", "-new", "-key", pair.key, "-subj", f"/CN={name}", "-days", "1",
        "-config", ext, "-extensions", "v3", "-out", pair.cert,
    )  # fmt: skip
    return pair


def issue(
    ca: KeyPair,
    directory: Path,
    name: str,
    *,
    server: bool,
    rsa: bool = False,
    san: str | None = None,
) -> KeyPair:
    """A leaf certificate signed by `ca`: for 127.0.0.1/localhost, or a client named `name`
    (subject alternative name DNS:`name` unless `san` gives others, in openssl's syntax)."""
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    _key(pair.key, rsa=rsa)
    csr = directory / f"{name}.csr"
    _run("req", "-new", "-key", pair.key, "-subj", f"/CN={name}", "-out", csr)
    ext = directory / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    san = san or ("IP:127.0.0.1, DNS:localhost" if server else f"DNS:{name}")
    ext.write_text(
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        f"extendedKeyUsage = {usage}\n"
        f"subjectAltName = {san}\n"
        "subjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid\n"
    )
    _run(
        "x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
        "-days", "1", "-extfile", ext, "-out", pair.cert,
    )  # fmt: skip
    return pair


@dataclass(frozen=True)
class Pki:
    """Everything the TLS tests need: a server CA, a client CA and an unrelated CA."""

    ca: KeyPair  # signs the server certificate
    server: KeyPair
    client_ca: KeyPair
    client: KeyPair  # signed by client_ca
    rogue_ca: KeyPair  # trusted by nobody
    rogue_client: KeyPair  # signed by rogue_ca
    rogue_server: KeyPair  # signed by rogue_ca, for 127.0.0.1
    rsa_server: KeyPair  # signed by ca, for 127.0.0.1, with an RSA key


def make_pki(directory: Path) -> Pki:
    ca = make_ca(directory, "server-ca")
    client_ca = make_ca(directory, "client-ca")
    rogue_ca = make_ca(directory, "rogue-ca")
    return Pki(
        ca=ca,
        server=issue(ca, directory, "server", server=True),
        client_ca=client_ca,
        client=issue(client_ca, directory, "prometheus", server=False),
        rogue_ca=rogue_ca,
        rogue_client=issue(rogue_ca, directory, "intruder", server=False),
        rogue_server=issue(rogue_ca, directory, "rogue-server", server=True),
        rsa_server=issue(ca, directory, "rsa-server", server=True, rsa=True),
    )
