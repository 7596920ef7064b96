"""HTTP basic auth against bcrypt hashes, with a cache of good logins and a budget for bcrypt.

bcrypt is slow on purpose (about 50 ms at cost 10 on one core, doubling with each step
of cost), so the work is arranged so that guessing cannot starve the real scraper:

- a successful check is remembered under a SHA-256 digest of user, password and hash
  (never the password itself), as exporter-toolkit does. A remembered login costs a
  dictionary lookup: it never waits for bcrypt. The memory survives re-reads of the web
  config (`adopt`); the hash is part of the key, so a changed hash is checked again.
- Failures are not remembered, so a flood of wrong passwords cannot push the real
  scraper's login out of the cache.
- Unknown users are checked against a fixed cost-10 hash (exporter-toolkit's choice), so
  the answer takes about as long as for a known user with a cost-10 hash, and a guess at
  an unknown name never costs more than that, whatever the costs in the file.
- One bcrypt check runs at a time (at most one CPU core). At most PENDING_CHECKS requests
  wait for it, each for at most WAIT_SECONDS; beyond that the answer is `Login.BUSY` at
  once (the server answers 503), so guesses hold neither threads nor request slots long.
"""

from __future__ import annotations

import binascii
import enum
import threading
from collections.abc import Mapping

PENDING_CHECKS = 4  # requests running or waiting for a bcrypt check at once
WAIT_SECONDS = 10.0  # longest wait for the bcrypt check of one request
CACHE_SIZE = 100  # good logins remembered

# bcrypt (cost 10) of a password nobody has: what unknown users are checked against
DECOY_HASH = b"$2b$10$qBdB3MHZMi/ng/brGSMzxOaWzauyUluxQENuuk40UrDRGd745nG4u"


class Login(enum.Enum):
    OK = "ok"  # right user and password
    DENIED = "denied"  # no, malformed or wrong credentials (401)
    BUSY = "busy"  # not checked: too many checks waiting for bcrypt (503)


class _BcryptGate:
    """Runs one bcrypt check at a time, with at most `pending` callers inside."""

    def __init__(self, pending: int, wait_seconds: float) -> None:
        self._inside = threading.BoundedSemaphore(pending)
        self._lock = threading.Lock()
        self._wait_seconds = wait_seconds

    def checkpw(self, password: bytes, hashed: bytes) -> bool | None:
        """bcrypt's verdict, or None when the check could not be run in time."""
        if not self._inside.acquire(blocking=False):
            return None
        try:
            if not self._lock.acquire(timeout=self._wait_seconds):
                return None
            import bcrypt  # loaded with the first login: only web configs with users check

            try:
                return bcrypt.checkpw(password, hashed)
            except ValueError:  # longer than 72 bytes, or a hash bcrypt rejects
                return False
            finally:
                self._lock.release()
        finally:
            self._inside.release()


class BasicAuth:
    """Checks `Authorization: Basic ...` headers against bcrypt hashes (user -> hash)."""

    def __init__(
        self,
        users: Mapping[str, bytes],
        *,
        pending_checks: int = PENDING_CHECKS,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self._users = dict(users)
        self._cache: dict[bytes, None] = {}
        self._cache_lock = threading.Lock()
        self._gate = _BcryptGate(pending_checks, wait_seconds)

    def adopt(self, previous: BasicAuth) -> None:
        """Share `previous`'s remembered logins and bcrypt queue (a re-read web config)."""
        self._cache = previous._cache
        self._cache_lock = previous._cache_lock
        self._gate = previous._gate

    def login(self, authorization: str | None) -> Login:
        """The verdict on an `Authorization` header value (None: no header)."""
        credentials = parse_basic(authorization)
        if credentials is None:
            return Login.DENIED
        user, password = credentials
        hashed = self._users.get(user.decode("utf-8", "surrogateescape"))
        known = hashed is not None
        if hashed is None:
            hashed = DECOY_HASH
        import hashlib  # here, not at the top: OpenSSL's libcrypto only once a login comes

        key = hashlib.sha256(
            b"%d:%s\0%d:%s\0%s" % (len(user), user, len(password), password, hashed)
        ).digest()
        if known:
            with self._cache_lock:
                if key in self._cache:
                    return Login.OK
        ok = self._gate.checkpw(password, hashed)
        if ok is None:
            return Login.BUSY
        if not (ok and known):
            return Login.DENIED
        with self._cache_lock:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = None
        return Login.OK


def parse_basic(authorization: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) from an `Authorization: Basic` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    import base64  # here, not at the top: only a server with users needs it (0.2 MB kept)

    try:
        decoded = base64.b64decode(token.strip().encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user, password
