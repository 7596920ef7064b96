"""A corpus of web config files that must each end in one clear line, never a crash or hang.

Used by the loader's unit tests (test_web_config.py) and by the tests that give them to
the real program at start and while it runs (test_web_config_e2e.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.certs import Pki


@dataclass(frozen=True)
class Hostile:
    name: str
    content: bytes | str  # str: formatted with {cert}, {key} and {ca}, then UTF-8
    expected: str  # what the one-line error must contain

    def render(self, pki: Pki) -> bytes:
        if isinstance(self.content, bytes):
            return self.content
        names = {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.client_ca.cert}
        return self.content.format(**names).encode()


def _laughs(levels: int = 9, width: int = 9) -> bytes:
    lines = ["a0: &a0 lol"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    lines.append(f"basic_auth_users: *a{levels}")
    return ("\n".join(lines) + "\n").encode()


TLS = "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
MUTUAL = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n"

CORPUS: tuple[Hostile, ...] = (
    # bytes that are not a YAML document at all
    Hostile("binary-garbage", bytes(range(256)) * 4, "invalid YAML: not utf-8 text"),
    Hostile("png-header", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "invalid YAML: not utf-8"),
    Hostile("nul-bytes", b"basic_auth_users:\x00\x00\n", "invalid YAML: character 0x0000"),
    Hostile("latin-1", "tls_server_config:\n  cert_file: caf\xe9.crt\n".encode("latin-1"), "0xe9"),
    Hostile(
        "utf-16-with-bom",
        "\ufefftls_server_confg: {}\n".encode("utf-16-le"),
        "unknown key 'tls_server_confg'",  # decoded, then refused for what it says
    ),
    Hostile("utf-16-without-bom", "a: b\n".encode("utf-16-le"), "invalid YAML: character 0x0000"),
    Hostile("control-character", b"a: \x1b[31mred\n", "invalid YAML: character 0x001b"),
    # YAML that is expensive or ambiguous
    Hostile("self-referencing-alias", b"a: &a\n  b: *a\n", "YAML aliases (*name) are not allowed"),
    Hostile("billion-laughs", _laughs(), "YAML aliases (*name) are not allowed"),
    Hostile("deep-flow-nesting", b"[" * 30_000 + b"]" * 30_000, "nested more than 32 levels"),
    Hostile(
        "deep-block-nesting",
        b"".join(b"  " * i + b"k:\n" for i in range(200)),
        "nested more than 32 levels",
    ),
    Hostile("long-list", b"[" + b"1," * 20_000 + b"1]", "more than 2000 values"),
    Hostile(
        "huge-scalar-value",
        "tls_server_config:\n  cert_file: " + "a" * 60_000 + "\n  key_file: {key}\n",
        "cert_file ",  # the message names the file, cut short
    ),
    Hostile("huge-key", b"k" * 60_000 + b": 1\n", "invalid YAML"),
    Hostile("too-large", b"# " + b"x" * (1 << 16), "larger than 65536 bytes"),
    Hostile("duplicate-key", b"basic_auth_users: {}\nbasic_auth_users: {}\n", "given twice"),
    Hostile("two-documents", b"a: 1\n---\nb: 2\n", "invalid YAML"),
    Hostile("python-object", b"!!python/object/apply:os.system [id]\n", "invalid YAML"),
    Hostile("tab-indentation", b"tls_server_config:\n\tcert_file: x\n", "invalid YAML: line 2"),
    Hostile("unhashable-key", b"{[a]: b}\n", "invalid YAML"),
    # well-formed YAML with the wrong shape or type for every key
    Hostile("scalar-document", b"hello\n", "the file must be a mapping, not a string"),
    Hostile("number-key", b"1: x\n", "unknown key '1'"),
    Hostile("null-key", b"~: x\n", "key None must be a string"),
    Hostile("tls-not-a-mapping", b"tls_server_config: 5\n", "must be a mapping, not a number"),
    Hostile("http-not-a-mapping", b"http_server_config: [a]\n", "must be a mapping, not a list"),
    Hostile("users-not-a-mapping", b"basic_auth_users: x\n", "must be a mapping of user: hash"),
    Hostile("rate-not-a-mapping", b"rate_limit: true\n", "must be a mapping, not true/false"),
    Hostile(
        "cert-file-list", TLS.replace("{cert}", "[a]"), "cert_file must be a string, not a list"
    ),
    Hostile("key-file-mapping", TLS.replace("{key}", "{{a: b}}"), "key_file must be a string"),
    Hostile("cert-inline-list", "tls_server_config:\n  cert: [x]\n", "cert must be a string"),
    Hostile("key-inline-mapping", "tls_server_config:\n  key: {{}}\n", "key must be a string"),
    Hostile("ca-file-list", TLS + "  client_ca_file: [x]\n", "client_ca_file must be a string"),
    Hostile("ca-inline-mapping", TLS + "  client_ca: {{a: 1}}\n", "client_ca must be a string"),
    Hostile(
        "ca-inline-junk", MUTUAL.replace("client_ca_file: {ca}", "client_ca: junk"), "client_ca"
    ),
    Hostile("auth-type-list", TLS + "  client_auth_type: [x]\n", "client_auth_type must be a"),
    Hostile("sans-string", MUTUAL + "  client_allowed_sans: x\n", "must be a list of strings"),
    Hostile("sans-nested", MUTUAL + "  client_allowed_sans: [[x]]\n", "must be a non-empty"),
    Hostile("min-version-number", TLS + "  min_version: 1.2\n", "'1.2' is not TLS12 or TLS13"),
    Hostile("max-version-list", TLS + "  max_version: [TLS13]\n", "max_version must be a string"),
    Hostile("ciphers-string", TLS + "  cipher_suites: x\n", "cipher_suites must be a list"),
    Hostile("ciphers-invented", TLS + "  cipher_suites: [TLS_X]\n", "unknown cipher 'TLS_X'"),
    Hostile("curves-number", TLS + "  curve_preferences: 5\n", "curve_preferences must be a list"),
    Hostile("curves-invented", TLS + "  curve_preferences: [P257]\n", "unknown curve 'P257'"),
    Hostile("prefer-quoted", TLS + "  prefer_server_cipher_suites: 'yes'\n", "true or false"),
    Hostile("headers-list", b"http_server_config:\n  headers: [a]\n", "headers must be a mapping"),
    Hostile(
        "header-value-list",
        b"http_server_config:\n  headers:\n    X-Frame-Options: [deny]\n",
        "must be a non-empty string, not a list",
    ),
    Hostile(
        "header-value-not-latin-1",
        "http_server_config:\n  headers:\n    Content-Security-Policy: default-src \u4e2d\n",
        "can not be sent in an HTTP header",
    ),
    Hostile(
        "header-value-control",
        b'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\x07"\n',
        "can not be sent in an HTTP header",
    ),
    Hostile(
        "http2-quoted", b"http_server_config:\n  http2: 'true'\n", "http2 must be true or false"
    ),
    Hostile("user-hash-list", b"basic_auth_users:\n  alice: [x]\n", "must be a bcrypt hash string"),
    Hostile("user-hash-number", b"basic_auth_users:\n  alice: 12\n", "not a bcrypt hash"),
    Hostile("user-null", b"basic_auth_users:\n  ~: x\n", "must be a non-empty string"),
    Hostile("interval-list", b"rate_limit:\n  interval: [1]\n", "is not a duration"),
    Hostile("interval-bare-number", b"rate_limit:\n  interval: 5\n", "has no unit"),
    Hostile("interval-words", b"rate_limit:\n  interval: fast\n", "is not a duration"),
    Hostile("burst-quoted", b"rate_limit:\n  interval: 1s\n  burst: '5'\n", "whole number"),
    Hostile("burst-negative", b"rate_limit:\n  interval: 1s\n  burst: -1\n", "whole number"),
    Hostile("burst-fraction", b"rate_limit:\n  interval: 1s\n  burst: 1.5\n", "whole number"),
    Hostile("burst-boolean", b"rate_limit:\n  interval: 1s\n  burst: yes\n", "whole number"),
)

#: the ones given to the real program at start (each start costs a process)
AT_START = (
    "binary-garbage",
    "latin-1",
    "utf-16-with-bom",
    "self-referencing-alias",
    "billion-laughs",
    "deep-flow-nesting",
    "huge-scalar-value",
    "too-large",
    "header-value-not-latin-1",
    "burst-negative",
)
