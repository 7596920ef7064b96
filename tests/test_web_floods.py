"""Floods of bad logins against the real program: the remembered scraper and the probes
keep getting 200 while the flood goes on.

Each flood is a fixed set of client threads on loopback that repeat their request until
the test has made its checks; nothing is measured in time.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import bcrypt
import pytest

from tests.support.exporter import Exporter
from tests.support.web import PASSWORD, basic, call, eventually, wait_serving, write

pytestmark = pytest.mark.e2e


class Flood:
    """`clients` threads, each sending GET `path` with `headers(n)` on a keep-alive
    connection, again and again until the block ends."""

    def __init__(
        self,
        port: int,
        clients: int,
        headers: Callable[[int], dict[str, str]],
        path: str = "/metrics",
    ) -> None:
        self.port = port
        self.path = path
        self.headers = headers
        self.statuses: list[int] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)
        ]

    def count(self, status: int) -> int:
        return self.statuses.count(status)

    def running(self) -> bool:
        return all(thread.is_alive() for thread in self._threads)

    def _client(self, n: int) -> None:
        connection: http.client.HTTPConnection | None = None
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                connection.request("GET", self.path, headers=self.headers(n))
                response = connection.getresponse()
                response.read()
                self.statuses.append(response.status)
                if response.will_close:
                    connection.close()
                    connection = None
                if response.status == 503:
                    self._stop.wait(0.02)  # turned away at once: do not spin
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(error)
                connection = None
                self._stop.wait(0.05)
        if connection is not None:
            connection.close()

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)


def remembered_scraper_and_probes_get_200(exporter: Exporter, rounds: int = 10) -> None:
    right = basic("prometheus", PASSWORD)
    for _ in range(rounds):
        for path in ("/metrics", "/healthz", "/livez"):
            result = call(exporter.port, path, headers=right, timeout=30)
            assert result.status == 200, (path, result.status, result.text)


def test_a_wrong_password_flood_does_not_lock_out_the_remembered_scraper(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    """50 clients guessing the scraper's password, with the default --web.max-requests 40:
    the guesses used to take every request slot while they waited for bcrypt, and the
    scraper, whose login was remembered, got 503 for as long as the flood lasted."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(12)).decode()
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = started(config=config)
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right, timeout=10))

    with Flood(exporter.port, 50, lambda n: basic("prometheus", f"guess-{n}")) as flood:
        eventually(lambda: flood.count(401) >= 2, timeout=30, what="guesses are being checked")
        remembered_scraper_and_probes_get_200(exporter)
        assert flood.running()
    assert set(flood.statuses) <= {401, 503}
    assert exporter.process.poll() is None


def test_an_unknown_user_flood_costs_a_cost_10_check_whatever_the_file_holds(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    """exporter-toolkit's test users include bob with a cost-18 hash. Unknown users used
    to be checked against a decoy of the highest cost in the file: one 401 took half a
    minute of bcrypt, and 41 such requests made /metrics and /healthz answer 503."""
    cheap = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    costly = "$2y$18$" + cheap[7:]  # bob's cost; never checked in this test
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  prometheus: '{cheap}'\n  bob: '{costly}'\n")
    exporter = started(config=config)
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right, timeout=10))

    with Flood(exporter.port, 41, lambda n: basic(f"intruder-{n}", "guess")) as flood:
        eventually(lambda: flood.count(401) >= 5, timeout=30, what="unknown users get 401 promptly")
        remembered_scraper_and_probes_get_200(exporter)
        assert flood.running()
    assert set(flood.statuses) <= {401, 503}
