"""The container's HEALTHCHECK: `python -m gpu_exporter.healthcheck`.

Asks the running exporter's liveness probe and exits 0 on 200, 1 otherwise with one line
on stderr. It works with the web config's TLS, basic auth and mutual TLS, configured by
environment variables (the Dockerfile sets the first):

- `GPU_EXPORTER_HEALTHCHECK_URL`: what to ask (default `http://127.0.0.1:9872/livez`);
  `https://` with TLS.
- `GPU_EXPORTER_HEALTHCHECK_AUTH_FILE`: a file holding `user:password` for basic auth
  (a Docker secret).
- `GPU_EXPORTER_HEALTHCHECK_CA_FILE`: the CA that signed the server certificate. Without
  it an `https://` URL on loopback is not verified (the probe talks to the exporter in
  its own container); any other host is checked against the system's CAs.
- `GPU_EXPORTER_HEALTHCHECK_CERT_FILE`, `GPU_EXPORTER_HEALTHCHECK_KEY_FILE`: the client
  certificate, where the web config requires one.

The probe never goes through a proxy: it only ever asks the exporter beside it, and
container engines pass the host's `http_proxy` into containers (podman does by default),
which urllib would otherwise follow even to 127.0.0.1.

Python's standard library only: the slim image has no curl or wget.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

DEFAULT_URL = "http://127.0.0.1:9872/livez"
TIMEOUT_SECONDS = 4.0


class HealthcheckError(Exception):
    """The probe could not be asked, or it said no; the message is one line."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(env: Mapping[str, str], host: str) -> ssl.SSLContext:
    ca = env.get("GPU_EXPORTER_HEALTHCHECK_CA_FILE")
    try:
        if ca:
            context = ssl.create_default_context(cafile=ca)
        elif _loopback(host):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context()
        cert = env.get("GPU_EXPORTER_HEALTHCHECK_CERT_FILE")
        if cert:
            context.load_cert_chain(cert, env.get("GPU_EXPORTER_HEALTHCHECK_KEY_FILE") or None)
    except (OSError, ssl.SSLError) as error:
        raise HealthcheckError(f"TLS settings: {error}") from None
    return context


def authorization(env: Mapping[str, str]) -> str | None:
    path = env.get("GPU_EXPORTER_HEALTHCHECK_AUTH_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            credentials = handle.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise HealthcheckError(f"GPU_EXPORTER_HEALTHCHECK_AUTH_FILE {path}: {error}") from None
    if ":" not in credentials:
        raise HealthcheckError(f"GPU_EXPORTER_HEALTHCHECK_AUTH_FILE {path}: not user:password")
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def check(env: Mapping[str, str]) -> str:
    """The probe's answer when it is 200; raises HealthcheckError otherwise."""
    url = env.get("GPU_EXPORTER_HEALTHCHECK_URL") or DEFAULT_URL
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HealthcheckError(f"GPU_EXPORTER_HEALTHCHECK_URL {url!r} is not an http(s) URL")
    request = urllib.request.Request(url)
    header = authorization(env)
    if header is not None:
        request.add_header("Authorization", header)
    context = tls_context(env, parts.hostname) if parts.scheme == "https" else None
    # an empty ProxyHandler: no proxy from the environment, whatever http_proxy says
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=TIMEOUT_SECONDS) as answer:
            body: str = answer.read(512).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        reason = error.read(512).decode("utf-8", "replace").strip()
        raise HealthcheckError(f"{url} answered {error.code}: {reason}") from None
    except (OSError, ValueError) as error:
        raise HealthcheckError(f"{url}: {getattr(error, 'reason', error)}") from None
    return body.strip()


def main() -> int:
    try:
        check(os.environ)
    except HealthcheckError as error:
        print(f"gpu-exporter healthcheck: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
