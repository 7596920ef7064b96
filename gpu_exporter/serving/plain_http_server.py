"""The standard library's HTTP server classes, imported without loading ssl.

`http.server` imports `http.client`, which imports ssl (and with it OpenSSL's libssl and
libcrypto, about 4 MiB of resident memory) only to offer `HTTPSConnection`, a client the
exporter never uses. This module imports `http.server` while ssl reads as missing, the
way `http.client` itself allows (`try: import ssl except ImportError`), so an exporter
serving plain HTTP never loads it. A web config that asks for TLS imports ssl afterwards
as usual (`serving.tls_context`): the server side of TLS does not go through http.client.

When ssl is already loaded (a test process, or an embedding program), nothing changes.
"""

from __future__ import annotations

import sys

if "ssl" not in sys.modules and "http.client" not in sys.modules:
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError
    try:
        import http.server
    finally:
        del sys.modules["ssl"]
else:
    import http.server

BaseHTTPRequestHandler = http.server.BaseHTTPRequestHandler
ThreadingHTTPServer = http.server.ThreadingHTTPServer

__all__ = ["BaseHTTPRequestHandler", "ThreadingHTTPServer"]
