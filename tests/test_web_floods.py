"""Floods against the real program: bad logins, header floods and clients that never
read; the remembered scraper and the probes keep getting 200 while the flood goes on.

Each flood is a fixed set of client threads on loopback that repeat their request until
the test has made its checks; nothing is measured in time.
"""

from __future__ import annotations

import functools
import http.client
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import bcrypt
import pytest

from tests.support.exporter import Exporter
from tests.support.web import (
    PASSWORD,
    basic,
    call,
    eventually,
    slow_readers,
    wait_serving,
    write,
)

pytestmark = pytest.mark.e2e


_Clients = TypeVar("_Clients", bound="Clients")


class Clients:
    """Client threads started when the block begins; `_stop` is set when it ends."""

    def __init__(self, targets: list[Callable[[], None]]) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=target, daemon=True) for target in targets]

    def running(self) -> bool:
        return all(thread.is_alive() for thread in self._threads)

    def __enter__(self: _Clients) -> _Clients:
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


class Flood(Clients):
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
        super().__init__([functools.partial(self._client, n) for n in range(clients)])

    def count(self, status: int) -> int:
        return self.statuses.count(status)

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


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_header_flood_is_bounded_and_scrapes_are_served_meanwhile(
    started: Callable[..., Exporter],
) -> None:
    """Issue 21: 40 clients that each send a request line and 100 header fields of 64 KiB
    and stall before the empty line. Every byte used to be kept for 10 seconds, before
    basic auth: 24 such clients got the exporter OOM-killed in a 128 MiB cgroup. A head
    now holds at most 16 KiB; the exporter stays under 120 MiB and answers a scrape
    within 2 seconds."""
    exporter = started()
    wait_serving(exporter, lambda: call(exporter.port))
    field = b"X-Pad: " + b"a" * (64 * 1024 - 9) + b"\r\n"
    flooders: list[socket.socket] = []

    def flood() -> None:
        sock = socket.create_connection(("127.0.0.1", exporter.port), timeout=30)
        flooders.append(sock)
        try:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            for _ in range(100):
                sock.sendall(field)
        except OSError:
            pass  # answered 431 and closed: the rest is never read

    threads = [threading.Thread(target=flood) for _ in range(40)]
    try:
        for thread in threads:
            thread.start()
        peak = 0.0
        for _ in range(40):  # while the flood is sent and for a while after
            peak = max(peak, rss_mib(exporter.process.pid))
            time.sleep(0.1)
        for thread in threads:
            thread.join(60)
        for _ in range(10):
            peak = max(peak, rss_mib(exporter.process.pid))
            time.sleep(0.1)
        assert peak < 120, f"{peak:.1f} MiB resident under the flood"
        assert call(exporter.port, timeout=2).status == 200
    finally:
        for sock in flooders:
            sock.close()
    assert rss_mib(exporter.process.pid) < 120
    assert exporter.process.poll() is None


def test_clients_that_pipeline_scrapes_and_never_read_do_not_starve_scrapes(
    started: Callable[..., Exporter],
) -> None:
    """Issue 21: 45 clients with a tiny receive buffer pipeline 150 scrapes each and never
    read. Each held one of the 40 request slots while its write waited, and real scrapes
    got 503 for as long as the attack went on."""
    exporter = started("--simulate", "8")
    wait_serving(exporter, lambda: call(exporter.port))
    held = slow_readers(exporter.port, 45, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 150)
    try:
        time.sleep(0.5)  # until the responses fill what the sockets can hold
        statuses = []
        for _ in range(20):
            statuses.append(call(exporter.port, timeout=10).status)
            time.sleep(0.1)
        assert statuses == [200] * 20
    finally:
        for sock in held:
            sock.close()


class NeverReading(Clients):
    """`clients` connections from 127.0.0.1, each with a 1 KiB receive buffer, that send
    `requests` and never read. Once `reconnect` is set, those the server refused or
    dropped are opened again at once, so the attack lasts until the block ends (at most
    `max_connections` in all)."""

    def __init__(
        self, port: int, clients: int, requests: bytes, max_connections: int = 5000
    ) -> None:
        self.port = port
        self.clients = clients
        self.requests = requests
        self.opened = 0
        self.reconnect = False
        self._budget = max_connections
        super().__init__([self._attack])

    def _connect(self) -> socket.socket | None:
        if self.opened >= self._budget:
            return None
        self.opened += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.settimeout(10)
        try:
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(self.requests)
        except OSError:
            pass  # refused or reset: the poll below sees it
        return sock

    def _attack(self) -> None:
        ended = select.POLLHUP | select.POLLERR | select.POLLRDHUP
        poller = select.poll()
        held: dict[int, socket.socket] = {}

        def add() -> None:
            if (sock := self._connect()) is not None:
                held[sock.fileno()] = sock
                poller.register(sock, ended)

        for _ in range(self.clients):
            add()
        while not self._stop.is_set():
            for fd, _ in poller.poll(100):
                poller.unregister(fd)
                held.pop(fd).close()
            while self.reconnect and len(held) < self.clients and self.opened < self._budget:
                add()
        for sock in held.values():
            sock.close()


def statuses_from(
    exporter: Exporter, sources: tuple[str, ...], headers: dict[str, str], rounds: int = 10
) -> dict[tuple[str, str], list[int]]:
    """{(source address, path): statuses} of `rounds` GETs of each probe and /metrics."""
    statuses: dict[tuple[str, str], list[int]] = {}
    for _ in range(rounds):
        for source in sources:
            for path in ("/livez", "/healthz", "/metrics"):
                result = call(exporter.port, path, headers=headers, timeout=30, source=source)
                statuses.setdefault((source, path), []).append(result.status)
    return statuses


@pytest.mark.parametrize("auth", [False, True], ids=["no-auth", "basic-auth"])
def test_clients_that_never_read_do_not_take_the_probes_and_scrapes_down(
    tmp_path: Path, started: Callable[..., Exporter], auth: bool
) -> None:
    """Issue 28: 300 clients with a 1 KiB receive buffer each pipeline 50 GET /metrics
    and never read. A connection whose response could not be written counted as busy for
    the whole 10-second write deadline, so 256 of them held every connection: /livez (the
    kubelet's liveness probe: a restart), /healthz and /metrics got 503 "too many open
    connections", without credentials. A connection that has been sending one response
    for a second now makes room for a new one: a well-behaved client, from another
    address (127.0.0.2) or the attackers' own, gets 200 for at least 90% of its requests.
    When the attackers come back as soon as they are dropped, a client from another
    address still does: the address that holds the most connections makes room first.
    Memory stays bounded. With basic auth the attackers get small 401s (their writes
    rarely block); the scraper's login is remembered before the attack."""
    config = None
    headers: dict[str, str] = {}
    if auth:
        config = tmp_path / "web.yml"
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
        write(config, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        headers = basic("prometheus", PASSWORD)
    exporter = started("--simulate", "8", config=config)
    wait_serving(exporter, lambda: call(exporter.port, headers=headers))
    pipelined = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50

    with NeverReading(exporter.port, 300, pipelined) as attack:
        eventually(lambda: attack.opened >= 300, timeout=30, what="300 clients connected")
        time.sleep(1.5)  # until their responses fill what the sockets hold, past the grace
        peak = rss_mib(exporter.process.pid)
        statuses = statuses_from(exporter, ("127.0.0.2", "127.0.0.1"), headers)
        peak = max(peak, rss_mib(exporter.process.pid))
        if not auth:  # the 401s never fill the sockets: no client is dropped to come back
            attack.reconnect = True
            eventually(lambda: attack.opened >= 450, timeout=30, what="attackers coming back")
            statuses |= {
                (f"{source} (attackers reconnecting)", path): got
                for (source, path), got in statuses_from(exporter, ("127.0.0.2",), headers).items()
            }
            peak = max(peak, rss_mib(exporter.process.pid))
    for (source, path), got in statuses.items():
        assert got.count(200) >= 9, (source, path, got)
    assert peak < 64, f"{peak:.1f} MiB resident under the attack"
    assert exporter.process.poll() is None
