"""The web config through the real program: hostile files at start and while running, and
the exporter-toolkit features (inline certificates, client SANs, ciphers, rate limit).
"""

from __future__ import annotations

import http.client
import signal
import ssl
import textwrap
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest

from tests.support.certs import Pki, issue
from tests.support.exporter import Exporter, run_exporter
from tests.support.hostile_web_configs import AT_START, CORPUS, Hostile
from tests.support.web import (
    PASSWORD,
    basic,
    call,
    eventually,
    tls_client,
    tls_config,
    wait_serving,
    write,
)

pytestmark = pytest.mark.e2e

NOT_RELOADED = "web config not reloaded"


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[:2000]
    return lines[0]


@pytest.mark.parametrize("hostile", [h for h in CORPUS if h.name in AT_START], ids=AT_START)
def test_a_hostile_web_config_at_start_exits_2_with_one_line(
    hostile: Hostile, pki: Pki, tmp_path: Path
) -> None:
    config = tmp_path / "web.yml"
    config.write_bytes(hostile.render(pki))
    result = run_exporter(["--simulate", "1", "--web.config.file", str(config)])
    assert result.returncode == 2, result.stderr[:2000]
    line = one_error_line(result.stderr)
    assert line.startswith(f"gpu-exporter: error: web config {config}: ")
    assert hostile.expected in line
    assert result.stdout == ""


def good_config(path: Path) -> str:
    """Basic auth and one header; returns the hash."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    write(
        path,
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    return hashed


def still_serving_the_old_config(exporter: Exporter) -> None:
    assert exporter.process.poll() is None, exporter.log()[-3000:]
    ok = call(exporter.port, headers=basic("prometheus", PASSWORD))
    assert ok.status == 200
    assert ok.headers.get("X-Frame-Options") == "deny"
    assert call(exporter.port).status == 401


def errors_logged(exporter: Exporter) -> list[str]:
    return [line for line in exporter.log().splitlines() if NOT_RELOADED in line]


def test_hostile_web_configs_on_sighup_keep_the_running_config(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    """Every file of the corpus, one SIGHUP each: one error line each, never a crash, and
    the settings in force stay (the right password, the header)."""
    config = tmp_path / "web.yml"
    good_config(config)
    exporter = started(config=config)
    wait_serving(exporter, lambda: call(exporter.port, headers=basic("prometheus", PASSWORD)))
    for count, hostile in enumerate(CORPUS, start=1):
        config.write_bytes(hostile.render(pki))
        exporter.signal(signal.SIGHUP)
        eventually(
            lambda count=count: len(errors_logged(exporter)) >= count,  # type: ignore[misc]
            timeout=15,
            what=f"{hostile.name}: the error is logged",
        )
        still_serving_the_old_config(exporter)
        errors = errors_logged(exporter)
        assert len(errors) == count, errors[-2:]
        assert "level=error" in errors[-1]
        assert hostile.expected in errors[-1], (hostile.name, errors[-1][:500])
    assert "Traceback" not in exporter.log()


@pytest.mark.parametrize(
    "name", ["binary-garbage", "billion-laughs", "deep-flow-nesting", "header-value-not-latin-1"]
)
def test_a_hostile_web_config_written_while_running_keeps_the_running_config(
    name: str, pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    hostile = next(h for h in CORPUS if h.name == name)
    config = tmp_path / "web.yml"
    good_config(config)
    exporter = started(config=config)
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right))
    tmp = config.with_suffix(".tmp")
    tmp.write_bytes(hostile.render(pki))
    tmp.replace(config)
    # the file is looked at (at most once a second) when requests come in
    eventually(
        lambda: call(exporter.port, headers=right).status == 200 and bool(errors_logged(exporter)),
        what="the error is logged",
    )
    for _ in range(3):
        still_serving_the_old_config(exporter)
    assert len(errors_logged(exporter)) == 1
    assert "Traceback" not in exporter.log()


# --- exporter-toolkit features ---------------------------------------------------------


def pem_block(path: Path) -> str:
    return "|\n" + textwrap.indent(path.read_text(), "    ")


def test_inline_certificate_and_key_serve_tls(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    config = tmp_path / "web.yml"
    write(
        config,
        f"tls_server_config:\n  cert: {pem_block(pki.server.cert)}"
        f"  key: {pem_block(pki.server.key)}",
    )
    exporter = started(config=config)
    trusted = tls_client(pki.ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=trusted))
    assert "gpu_up{" in call(exporter.port, context=trusted).text
    # the key was handed to ssl through memory: no copy of it is left in a file
    key_body = pki.server.key.read_text().splitlines()[1]
    for directory in {Path("/tmp"), tmp_path}:
        for path in directory.glob("gpu-exporter-*"):
            if not path.is_file():
                continue  # another program's folder (make demo-alerts' is one)
            assert key_body not in path.read_text(errors="replace"), path


def test_client_allowed_sans_admit_only_the_listed_names(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    other = issue(pki.client_ca, tmp_path, "other-scraper", server=False)  # SAN other-scraper
    config = tls_config(
        pki,
        tmp_path,
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki.client_ca.cert}\n"
        "  client_allowed_sans: [prometheus, 10.9.8.7]\n",
    )
    exporter = started(config=config)
    allowed = tls_client(pki.ca.cert, pki.client)  # SAN prometheus
    wait_serving(exporter, lambda: call(exporter.port, context=allowed))
    assert call(exporter.port, context=allowed).status == 200
    refused = (ssl.SSLError, ConnectionError, http.client.HTTPException)
    with pytest.raises(refused):  # signed by the client CA, but not a listed name
        call(exporter.port, context=tls_client(pki.ca.cert, other))
    with pytest.raises(refused):  # no certificate at all
        call(exporter.port, context=tls_client(pki.ca.cert))
    assert call(exporter.port, context=allowed).status == 200


def test_cipher_suites_restrict_what_tls12_clients_may_use(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    config = tls_config(
        pki,
        tmp_path,
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n  max_version: TLS12\n",
    )
    exporter = started(config=config)
    trusted = tls_client(pki.ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=trusted))
    connection = http.client.HTTPSConnection("127.0.0.1", exporter.port, context=trusted)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    assert connection.sock.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"  # type: ignore[union-attr]
    connection.close()
    narrow = tls_client(pki.ca.cert)
    narrow.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    with pytest.raises(ssl.SSLError):
        call(exporter.port, context=narrow)


def test_rate_limit_answers_429_beyond_the_burst_but_not_to_probes(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    config = tmp_path / "web.yml"
    write(config, "rate_limit:\n  interval: 1h\n  burst: 3\n")
    exporter = started(config=config)
    wait_serving(exporter, lambda: call(exporter.port, "/healthz"))  # probes spend no token
    statuses = [call(exporter.port, "/metrics").status for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    limited = call(exporter.port, "/")
    assert limited.status == 429
    assert limited.text == "429 too many requests\n"
    for probe in ("/healthz", "/livez"):
        assert call(exporter.port, probe).status == 200
    assert "rate_limit=3/3600s" in exporter.log()
