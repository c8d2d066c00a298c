"""The listener's SASL logins (no Ray): PLAIN and both SCRAMs against stored credentials, driven by
scramp's client; wrong passwords, unknown users and out-of-order steps are refused."""

from __future__ import annotations

import asyncio

import pytest
import scramp
from kio.schema.errors import ErrorCode

from raylog.kafka.sasl import SaslSession, credentials

USERS = {"alice": credentials("wonderland", iterations=4096)}


async def lookup(name):
    return USERS.get(name)


def test_stored_credentials_hold_no_password():
    stored = USERS["alice"]
    assert set(stored) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "wonderland" not in repr(stored)


@pytest.mark.parametrize("user,password,ok", [("alice", "wonderland", True), ("alice", "wrong", False),
                                              ("bob", "wonderland", False)])
def test_plain(user, password, ok):
    async def run():
        session = SaslSession(lookup)
        assert session.handshake("PLAIN") == ErrorCode.none
        code, _, _ = await session.authenticate(f"\0{user}\0{password}".encode())
        assert (code == ErrorCode.none) == ok
        assert session.principal == (user if ok else None)
    asyncio.run(run())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("password,ok", [("wonderland", True), ("wrong", False)])
def test_scram(mechanism, password, ok):
    async def run():
        session = SaslSession(lookup)
        assert session.handshake(mechanism) == ErrorCode.none
        client = scramp.ScramClient([mechanism], "alice", password)
        code, server_first, _ = await session.authenticate(client.get_client_first().encode())
        assert code == ErrorCode.none
        client.set_server_first(server_first.decode())
        code, server_final, message = await session.authenticate(client.get_client_final().encode())
        assert (code == ErrorCode.none) == ok, message
        if ok:
            client.set_server_final(server_final.decode())  # the client checks the server's proof
            assert session.principal == "alice"
        else:
            assert session.principal is None
    asyncio.run(run())


def test_out_of_order_and_unknown_mechanisms_are_refused():
    async def run():
        session = SaslSession(lookup)
        assert (await session.authenticate(b"\0alice\0wonderland"))[0] == ErrorCode.illegal_sasl_state
        assert session.handshake("GSSAPI") == ErrorCode.unsupported_sasl_mechanism
        assert session.handshake("PLAIN") == ErrorCode.none
        assert session.handshake("PLAIN") == ErrorCode.illegal_sasl_state
        assert (await session.authenticate(b"garbage"))[0] == ErrorCode.sasl_authentication_failed
    asyncio.run(run())
