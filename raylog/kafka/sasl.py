"""SASL for the Kafka listener: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, as Kafka's brokers offer
them, against the users the controller keeps (``raylog users``).

A user is stored as SCRAM credentials only (RFC 5802: salt, iteration count, StoredKey,
ServerKey, for each of the two hashes), computed by the client that adds the user: no password
reaches the controller or its metadata log. A PLAIN login is checked against the same
credentials (the password's SCRAM-SHA-256 StoredKey must match), so one ``raylog users add``
serves every mechanism.

The SCRAM exchange follows Kafka's ScramSaslServer rather than the letter of RFC 5802 on one
point: the client-final nonce must end with the server's nonce (Kafka checks endsWith), because
librdkafka before 1.9 (Debian's kcat) sends its own nonce in front of the server's. Passwords are
UTF-8 without SASLprep, as Kafka's clients and broker hash them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Awaitable, Callable

from kio.schema.errors import ErrorCode

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
ITERATIONS = 8192
"""Kafka's scram iterations default is 4096; twice that costs a login ~10 ms here."""

Lookup = Callable[[str], Awaitable[dict | None]]
"""user name -> its credentials ({mechanism: {salt, stored_key, server_key, iterations}}) or None."""


class AuthenticationFailed(ValueError):
    """A login that does not match: answered SASL_AUTHENTICATION_FAILED."""


def _keys(password: str, salt: bytes, iterations: int, hash_name: str) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return hashlib.new(hash_name, client_key).digest(), hmac.new(salted, b"Server Key", hash_name).digest()


def credentials(password: str, iterations: int = ITERATIONS) -> dict:
    """The SCRAM credentials of ``password`` for both mechanisms (base64 fields): what is stored."""
    if not isinstance(password, str) or not password:
        raise ValueError("a password is a non-empty string")
    out = {}
    for mechanism, hash_name in SCRAM.items():
        salt = secrets.token_bytes(32)
        stored_key, server_key = _keys(password, salt, iterations, hash_name)
        out[mechanism] = {"salt": _b64(salt), "stored_key": _b64(stored_key), "server_key": _b64(server_key),
                          "iterations": iterations}
    return out


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"malformed SCRAM attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


class ScramExchange:
    """The server's side of one SCRAM login, after its client-first message."""

    def __init__(self, mechanism: str, client_first: str, stored: dict):
        parts = client_first.split(",", 2)
        if len(parts) < 3 or parts[0] not in ("n", "y"):
            raise AuthenticationFailed("a SCRAM client-first message starts with the gs2 header n,, or y,,")
        self.gs2_header = f"{parts[0]},{parts[1]},"
        self.client_first_bare = parts[2]
        attrs = _attributes(self.client_first_bare)
        if "r" not in attrs or "n" not in attrs:
            raise AuthenticationFailed("a SCRAM client-first message names a user and a nonce")
        self.hash_name = SCRAM[mechanism]
        self.stored_key = base64.b64decode(stored["stored_key"])
        self.server_key = base64.b64decode(stored["server_key"])
        self.nonce = attrs["r"] + secrets.token_hex(32)
        self.server_first = f"r={self.nonce},s={stored['salt']},i={stored['iterations']}"

    def finish(self, client_final: str) -> str:
        """Check the client's proof; the server-final message (the server's own proof)."""
        without_proof, sep, proof = client_final.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("a SCRAM client-final message ends with its proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != _b64(self.gs2_header.encode("utf-8")):
            raise AuthenticationFailed("channel binding does not match the client-first message")
        if not attrs.get("r", "").endswith(self.nonce):
            raise AuthenticationFailed("the nonce is not the server's")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode("utf-8")
        signature = hmac.new(self.stored_key, auth_message, self.hash_name).digest()
        given = base64.b64decode(proof, validate=True)
        if len(given) != len(signature):
            raise AuthenticationFailed("invalid user name or password")
        client_key = bytes(a ^ b for a, b in zip(given, signature))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), self.stored_key):
            raise AuthenticationFailed("invalid user name or password")
        return "v=" + _b64(hmac.new(self.server_key, auth_message, self.hash_name).digest())


def _plain_matches(password: str, stored: dict) -> bool:
    stored_key, _ = _keys(password, base64.b64decode(stored["salt"]), stored["iterations"], "sha256")
    return hmac.compare_digest(stored_key, base64.b64decode(stored["stored_key"]))


def _scram_user(client_first: str) -> str:
    """The user name of a SCRAM client-first message (gs2 header, then n=<name>,r=<nonce>)."""
    for attribute in client_first.split(",")[2:]:
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=")
    raise AuthenticationFailed("no user name in the SCRAM client-first message")


class SaslSession:
    """One connection's authentication: SaslHandshake names the mechanism, then SaslAuthenticate
    carries its tokens (one for PLAIN, two for SCRAM). ``principal`` is set once it succeeded."""

    def __init__(self, lookup: Lookup):
        self._lookup = lookup
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.bare_tokens = False
        """After a SaslHandshake v0 the client sends its tokens as bare size-prefixed frames."""
        self._scram = None

    def handshake(self, mechanism: str, version: int = 1) -> ErrorCode:
        if self.mechanism is not None or self.principal is not None:
            return ErrorCode.illegal_sasl_state
        if mechanism not in MECHANISMS:
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self.bare_tokens = version == 0
        return ErrorCode.none

    async def authenticate(self, token: bytes) -> tuple[ErrorCode, bytes, str | None]:
        """(error code, token for the client, error message). After an error the connection ends."""
        if self.mechanism is None or self.principal is not None:
            return ErrorCode.illegal_sasl_state, b"", "SaslHandshake first"
        try:
            if self.mechanism == "PLAIN":
                return await self._plain(token)
            return await self._scram_step(token)
        except (ValueError, UnicodeDecodeError, KeyError) as exc:
            return ErrorCode.sasl_authentication_failed, b"", f"authentication failed: {exc}"

    async def _plain(self, token: bytes) -> tuple[ErrorCode, bytes, str | None]:
        parts = token.decode("utf-8").split("\0")
        if len(parts) != 3:
            raise ValueError("a PLAIN token is authzid NUL user NUL password")
        _authzid, user, password = parts
        stored = await self._lookup(user)
        if stored is None or not _plain_matches(password, stored["SCRAM-SHA-256"]):
            return ErrorCode.sasl_authentication_failed, b"", "authentication failed: invalid user name or password"
        self.principal = user
        return ErrorCode.none, b"", None

    async def _scram_step(self, token: bytes) -> tuple[ErrorCode, bytes, str | None]:
        message = token.decode("utf-8")
        if self._scram is None:
            user = _scram_user(message)
            stored = await self._lookup(user)
            if stored is None:
                return ErrorCode.sasl_authentication_failed, b"", "authentication failed: invalid user name or password"
            self._scram = (ScramExchange(self.mechanism, message, stored[self.mechanism]), user)
            return ErrorCode.none, self._scram[0].server_first.encode("utf-8"), None
        exchange, user = self._scram
        server_final = exchange.finish(message)
        self.principal = user
        return ErrorCode.none, server_final.encode("utf-8"), None
