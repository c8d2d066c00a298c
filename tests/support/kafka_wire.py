"""Kafka's wire protocol by hand, for tests that send the listener exact frames."""

from __future__ import annotations

import socket


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """The next ``n`` bytes the listener sends."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data
