"""The TCP listener Kafka clients connect to: frames in, answers out in the order the requests
came. A connection's requests are worked on one at a time, as Kafka does, except consecutive
Produce requests: up to PIPELINED_PRODUCES of them at once, so one request's batches are decoded
while the one before it is being appended, and their appends are still issued to the leaders in
request order (broker_api.SubmitOrder).

Who may connect. Without SASL the listener binds loopback only (ClusterConfig.kafka_listener),
and admits a connection only from a process of the uid that runs this Ray cluster, the uid that
holds Ray's token. For a TCP peer the kernel's socket table (/proc/net/tcp) names the uid that owns
the client's end, as SO_PEERCRED does for the produce channel's Unix socket; anything else
(another user on the host, a container sharing the host's network, an end not found) is closed at
once. With SASL (kafka_listener_sasl, required on a network address) every connection logs in as
a user of ``raylog users`` (raylog/kafka/sasl.py) before any request but ApiVersions and the SASL
exchange itself; a failed login is answered and closed. TLS wraps either when a certificate and
key are given.

What a connection can cost: a frame above ``max_request_bytes`` (Kafka's socket.request.max.bytes,
100 MiB) or of no size closes it before anything is read; bytes that are not a request close it;
an API or version not served gets ApiVersions' refusal (for ApiVersions) or a close (for the
rest), as from Kafka. Frames being read or answered share QUEUED_MAX_REQUEST_BYTES, so memory
stays bounded however many clients send; a frame that trickles in (FRAME_TIMEOUT_S) or a
connection that stays silent (IDLE_TIMEOUT_S) is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import socket
import ssl
import struct

from kio.schema.errors import ErrorCode

from raylog.errors import CorruptRecordError, InvalidConfigError
from raylog.kafka import frames
from raylog.kafka.broker_api import SubmitOrder
from raylog.kafka.sasl import MECHANISMS, Lookup, SaslSession

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 100 * 1024 * 1024
QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024
"""Bytes of requests being read or answered at once, over all connections (Kafka's
queued.max.request.bytes): a frame waits for room before its bytes are read, so the listener's
memory stays bounded however many clients send large frames, or send them slowly."""
IDLE_TIMEOUT_S = 600.0
"""A connection that sends nothing for this long is closed (Kafka's connections.max.idle.ms)."""
FRAME_TIMEOUT_S = 60.0
"""A frame whose bytes do not all arrive this long after its size is closed (a slowloris client)."""
PORT_ATTEMPTS = 100
"""A taken port moves the listener to the next one, this many times."""
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
PIPELINED_PRODUCES = 5
"""Produce requests of one connection answered at once: librdkafka's and the Java client's
max.in.flight.requests.per.connection (5, the most an idempotent producer may use)."""
_PRODUCE = struct.pack(">h", 0)
_SIZE = struct.Struct(">i")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid owning the other end of a loopback TCP connection, from the kernel's socket table;
    None when it is not listed (another network namespace)."""
    peer, local = sock.getpeername(), sock.getsockname()
    family = sock.family
    table = "/proc/net/tcp6" if family == socket.AF_INET6 else "/proc/net/tcp"
    want_local, want_remote = _proc_address(family, peer), _proc_address(family, local)
    try:
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == want_local and fields[2] == want_remote:
                    return int(fields[7])
    except OSError:
        return None
    return None


def _proc_address(family: int, address: tuple) -> str:
    packed = socket.inet_pton(family, address[0])
    if family == socket.AF_INET:
        host = packed[::-1].hex().upper()
    else:  # four 32-bit words, each in host (little-endian) order
        host = "".join(packed[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4))
    return f"{host}:{address[1]:04X}"


class KafkaListener:
    """Serves ``api`` (a BrokerApi, or anything with ``async handle(request)``) on ``host``:``port``."""

    def __init__(self, api, host: str, port: int, max_request_bytes: int = MAX_REQUEST_BYTES,
                 sasl: Lookup | None = None, tls: ssl.SSLContext | None = None):
        self.api, self.host, self.port = api, host, port
        self.sasl, self.tls = sasl, tls
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.base_events.Server | None = None
        self.connections = 0
        self.refused = 0
        self._room = QUEUED_MAX_REQUEST_BYTES
        self._room_freed = asyncio.Condition()

    async def start(self) -> int:
        """Bind the first free port from ``port`` on; returns it."""
        last: OSError | None = None
        for port in range(self.port, min(self.port + PORT_ATTEMPTS, 65536)):
            try:
                self._server = await asyncio.start_server(self._serve, self.host, port, reuse_address=True,
                                                          ssl=self.tls)
            except OSError as exc:
                last = exc
                continue
            self.port = port
            return port
        raise InvalidConfigError(f"no free port for the Kafka listener on {self.host} from {self.port}: {last}")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = None
        if self.sasl is not None:
            session = SaslSession(self.sasl)
        elif peer_uid(writer.get_extra_info("socket")) != os.getuid():
            self.refused += 1
            logger.warning("event=kafka_connection_refused peer=%s reason=not_this_clusters_uid",
                           writer.get_extra_info("peername"))
            writer.close()
            return
        self.connections += 1
        peer = str((writer.get_extra_info("peername") or ("",))[0])
        answers: asyncio.Queue = asyncio.Queue()
        closing = asyncio.Event()
        sender = asyncio.create_task(self._send_answers(answers, writer, closing))
        order = SubmitOrder()
        in_flight: list[tuple[asyncio.Task, bool]] = []
        """Requests still being worked on, oldest first, and whether each is a produce."""
        try:
            while not closing.is_set():
                (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(_SIZE.size), IDLE_TIMEOUT_S))
                if not 0 < size <= self.max_request_bytes:
                    logger.warning("event=kafka_frame_refused size=%d limit=%d", size, self.max_request_bytes)
                    return
                await self._reserve(size)
                try:
                    frame = await asyncio.wait_for(reader.readexactly(size), FRAME_TIMEOUT_S)
                except BaseException:
                    await self._release(size)
                    raise
                in_flight = [(task, produce) for task, produce in in_flight if not task.done()]
                produce = frame[:2] == _PRODUCE and (session is None or session.principal is not None)
                # Kafka answers a connection's requests one at a time. Produce requests are the
                # exception here: up to PIPELINED_PRODUCES of them run at once (their appends
                # still issued in order), anything else waits for every request before it.
                if in_flight and (not produce or not all(p for _, p in in_flight)
                                  or len(in_flight) >= PIPELINED_PRODUCES):
                    await asyncio.wait([task for task, _ in in_flight])
                    in_flight = []
                if closing.is_set():  # an earlier request closed the connection: nothing after it runs
                    await self._release(size)
                    break
                turn = (order, order.ticket()) if produce else None
                task = asyncio.create_task(self._respond(frame, peer, session, turn, closing))
                in_flight.append((task, produce))
                answers.put_nowait((task, size))
                del frame
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            answers.put_nowait(None)
            with contextlib.suppress(Exception):
                await sender
            self.connections -= 1
            writer.close()

    async def _respond(self, frame: bytes, peer: str, session: SaslSession | None,
                       turn: tuple[SubmitOrder, int] | None, closing: asyncio.Event) -> bytes | None:
        try:
            if closing.is_set():
                raise _Close
            if session is not None and session.bare_tokens and session.principal is None:
                return await self._bare_token(frame, session)
            return await self._answer(frame, peer, session, turn)
        except _Close:
            # Set at once, not when its answer is sent: a pipelined request behind it starts only
            # after this one's first step (where frames are refused), and sees it.
            closing.set()
            raise
        finally:
            if turn is not None:
                turn[0].done(turn[1])  # a request that ended before its appends must not hold the next

    async def _send_answers(self, answers: asyncio.Queue, writer: asyncio.StreamWriter,
                            closing: asyncio.Event) -> None:
        """Writes each request's answer in the order the requests came; a _Close ends the
        connection after its answer, and the requests behind it are dropped unanswered."""
        closed = False
        while (item := await answers.get()) is not None:
            task, size = item
            try:
                if closed:
                    task.cancel()
                    continue
                try:
                    answer = await task
                except _Close as close:
                    closed = True
                    if close.answer:
                        writer.write(close.answer)
                        await writer.drain()
                    writer.close()
                    continue
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
            except (ConnectionError, ssl.SSLError):
                closed = True
                closing.set()
                writer.close()
            except Exception:  # noqa: BLE001 - a handler's bug ends its connection, not the listener
                logger.exception("event=kafka_request_failed")
                closed = True
                closing.set()
                writer.close()
            finally:
                await self._release(size)

    async def _reserve(self, size: int) -> None:
        async with self._room_freed:
            await self._room_freed.wait_for(lambda: self._room >= size)
            self._room -= size

    async def _release(self, size: int) -> None:
        async with self._room_freed:
            self._room += size
            self._room_freed.notify_all()

    async def _answer(self, frame: bytes, peer: str, session: SaslSession | None,
                      turn: tuple[SubmitOrder, int] | None = None) -> bytes | None:
        try:
            request = frames.parse_request(frame)
        except frames.UnsupportedVersion as exc:
            if exc.api_key == frames.API_VERSIONS:
                return frames.unsupported_version_answer(exc.correlation_id)
            raise _Close from None
        except CorruptRecordError as exc:
            logger.warning("event=kafka_request_refused reason=%s", exc)
            raise _Close from None
        if request.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return await self._sasl(request, session)
        if session is not None and session.principal is None and request.api_key != frames.API_VERSIONS:
            logger.warning("event=kafka_request_refused peer=%s reason=not_authenticated api=%d", peer, request.api_key)
            raise _Close
        response = await self.api.handle(request, peer, turn)
        if response is None:
            return None
        return frames.encode_response(request.api_key, request.api_version, request.correlation_id, response)

    async def _bare_token(self, token: bytes, session: SaslSession) -> bytes:
        """A SASL token after a v0 handshake, answered with a bare token (Kafka before KIP-152)."""
        code, answer, message = await session.authenticate(token)
        if code != ErrorCode.none:
            logger.info("event=kafka_login_failed mechanism=%s reason=%s", session.mechanism, message)
            raise _Close
        return _SIZE.pack(len(answer)) + answer

    async def _sasl(self, request: frames.Request, session: SaslSession | None) -> bytes:
        cls = frames.response_class(request.api_key, request.api_version)
        if request.api_key == SASL_HANDSHAKE:
            code = ErrorCode.unsupported_sasl_mechanism if session is None else session.handshake(
                request.body.mechanism, request.api_version)
            body = frames.make(cls, error_code=code, mechanisms=MECHANISMS if session is not None else ())
            answer = frames.encode_response(request.api_key, request.api_version, request.correlation_id, body)
            if code != ErrorCode.none:
                raise _Close(answer)
            return answer
        if session is None:
            code, token, message = ErrorCode.illegal_sasl_state, b"", "this listener has no SASL"
        else:
            code, token, message = await session.authenticate(bytes(request.body.auth_bytes))
        body = frames.make(cls, error_code=code, error_message=message, auth_bytes=token,
                           session_lifetime=datetime.timedelta(0))
        answer = frames.encode_response(request.api_key, request.api_version, request.correlation_id, body)
        if code != ErrorCode.none:
            logger.info("event=kafka_login_failed mechanism=%s reason=%s", session and session.mechanism, message)
            raise _Close(answer)
        if session.principal is not None:
            logger.info("event=kafka_login user=%s mechanism=%s", session.principal, session.mechanism)
        return answer


class _Close(Exception):
    """End this connection (Kafka closes on a request it cannot read), after ``answer`` if given
    (a refused login is told why)."""

    def __init__(self, answer: bytes = b""):
        super().__init__()
        self.answer = answer
