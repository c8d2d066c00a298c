"""Kafka's wire protocol by hand, for tests that send the listener exact frames."""

from __future__ import annotations

import io
import socket
import struct


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """The next ``n`` bytes the listener sends."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def call(sock: socket.socket, request, response_cls, correlation_id: int = 7):
    """Send the kio entity ``request`` as a client's frame and read the listener's answer as
    ``response_cls`` (of the same API and version)."""
    from kio.serial import entity_reader, entity_writer

    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    client_id = b"test"
    # Request header v1 (v2, for a flexible version, adds an empty tagged-field section).
    header = struct.pack(">hhih", request.__api_key__, request.__version__, correlation_id, len(client_id)) + client_id
    payload = header + (b"\x00" if request.__flexible__ else b"") + body.getvalue()
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    answer = recv_exactly(sock, size)
    assert struct.unpack_from(">i", answer)[0] == correlation_id
    # Response header v0 is the correlation id; v1 (flexible) adds a tagged-field section.
    response, _ = entity_reader(response_cls)(answer, 5 if response_cls.__flexible__ else 4)
    return response
