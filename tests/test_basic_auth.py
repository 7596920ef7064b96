"""Basic auth: bcrypt checks, the cache of good logins, the fixed decoy and the bcrypt queue."""

from __future__ import annotations

import base64
import threading
import time

import bcrypt
import pytest

from gpu_exporter.serving.basic_auth import DECOY_HASH, BasicAuth, Login, parse_basic

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4))


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_parse_basic() -> None:
    assert parse_basic(header("alice", "pa:ss")) == (b"alice", b"pa:ss")
    assert parse_basic("basic " + base64.b64encode(b"a:").decode()) == (b"a", b"")
    for bad in (
        None,
        "",
        "Basic",
        "Bearer abc",
        "Basic !!!",
        "Basic " + base64.b64encode(b"x").decode(),
    ):
        assert parse_basic(bad) is None, bad


def test_basic_auth_checks_bcrypt_and_caches_only_successes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    auth = BasicAuth({"alice": HASH})
    assert auth.login(header("alice", "secret")) is Login.OK
    assert auth.login(header("alice", "secret")) is Login.OK
    assert calls == [b"secret"]  # the second check came from the cache
    assert auth.login(header("alice", "wrong")) is Login.DENIED
    assert auth.login(header("alice", "wrong")) is Login.DENIED
    assert calls.count(b"wrong") == 2  # failures are never cached
    # an unknown user costs a bcrypt round too (against a decoy), and fails even with a
    # password that is right for someone else
    assert auth.login(header("bob", "secret")) is Login.DENIED
    assert calls.count(b"secret") == 2
    assert auth.login(None) is Login.DENIED
    assert auth.login(header("alice", "x" * 100)) is Login.DENIED  # bcrypt refuses > 72 bytes


def test_basic_auth_cache_is_bounded() -> None:
    users = {f"user{n}": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)) for n in range(150)}
    auth = BasicAuth(users)
    for user in users:
        assert auth.login(header(user, "pw")) is Login.OK
    assert len(auth._cache) == 100
    assert auth.login(header("user0", "pw")) is Login.OK  # evicted, checked again, still right


def test_a_changed_hash_does_not_reuse_a_cached_success() -> None:
    other = bcrypt.hashpw(b"other", bcrypt.gensalt(4))
    first = BasicAuth({"alice": HASH})
    assert first.login(header("alice", "secret")) is Login.OK
    second = BasicAuth({"alice": other})
    second.adopt(first)  # a re-read file shares the cache: the key includes the hash
    assert second.login(header("alice", "secret")) is Login.DENIED
    assert second.login(header("alice", "other")) is Login.OK


def test_a_reread_file_keeps_remembered_logins(monkeypatch: pytest.MonkeyPatch) -> None:
    first = BasicAuth({"alice": HASH})
    assert first.login(header("alice", "secret")) is Login.OK
    second = BasicAuth({"alice": HASH, "bob": HASH})
    second.adopt(first)
    monkeypatch.setattr(bcrypt, "checkpw", pytest.fail)  # no bcrypt round
    assert second.login(header("alice", "secret")) is Login.OK


def test_unknown_users_are_checked_against_a_fixed_cost_10_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not against the costliest hash in the file: with exporter-toolkit's testdata (a
    cost-18 user) that made every guess at an unknown name take half a minute."""
    assert DECOY_HASH.startswith(b"$2b$10$")
    checked: list[bytes] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return False

    def hashpw(password: bytes, salt: bytes) -> bytes:
        raise AssertionError(f"no hash may be made at login time (salt {salt!r})")

    monkeypatch.setattr(bcrypt, "checkpw", checkpw)
    monkeypatch.setattr(bcrypt, "hashpw", hashpw)
    costly = b"$2y$18$" + HASH[7:]  # a cost-18 hash, as the toolkit's user bob has
    auth = BasicAuth({"bob": costly})
    assert auth.login(header("mallory", "guess")) is Login.DENIED
    assert checked == [DECOY_HASH]


def test_the_decoy_really_is_a_bcrypt_hash() -> None:
    assert bcrypt.checkpw(b"not the password", DECOY_HASH) is False


class BlockingBcrypt:
    """bcrypt.checkpw stand-in that holds every check until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.entered.release()
        assert self.release.wait(10)
        return False


def test_bcrypt_checks_have_their_own_small_queue_and_never_block_cached_logins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    auth = BasicAuth({"alice": HASH}, pending_checks=3, wait_seconds=10)
    assert auth.login(header("alice", "secret")) is Login.OK  # remembered from now on
    blocking = BlockingBcrypt()
    monkeypatch.setattr(bcrypt, "checkpw", blocking)

    verdicts: list[Login] = []
    guesses = [
        threading.Thread(target=lambda: verdicts.append(auth.login(header("alice", "guess"))))
        for _ in range(3)
    ]
    for thread in guesses:
        thread.start()
    assert blocking.entered.acquire(timeout=5)  # one guess is in bcrypt, two wait for it
    # ... once they have reached the queue: a started thread may not have yet (a loaded
    # machine), and the fourth guess would take its place and wait in bcrypt itself
    deadline = time.monotonic() + 5
    while auth._gate._inside._value and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        # the queue is full: a fourth guess, a new user's login, is turned away at once
        assert auth.login(header("alice", "fourth")) is Login.BUSY
        assert auth.login(header("nobody", "x")) is Login.BUSY
        # a remembered login neither waits nor is turned away
        assert auth.login(header("alice", "secret")) is Login.OK
    finally:
        blocking.release.set()
        for thread in guesses:
            thread.join(10)
    assert verdicts == [Login.DENIED] * 3


def test_a_check_that_cannot_start_in_time_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"alice": HASH}, pending_checks=2, wait_seconds=0.0)
    blocking = BlockingBcrypt()
    monkeypatch.setattr(bcrypt, "checkpw", blocking)
    first = threading.Thread(target=auth.login, args=(header("alice", "guess"),))
    first.start()
    assert blocking.entered.acquire(timeout=5)
    try:
        assert auth.login(header("alice", "secret")) is Login.BUSY  # not remembered yet
    finally:
        blocking.release.set()
        first.join(10)
