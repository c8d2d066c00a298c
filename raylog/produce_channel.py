"""The same-node produce channel: a producer on a partition leader's Ray node sends its batches to
the replica over a Unix socket instead of a Ray call; the Kafka listener on that node also fetches
through it (a consumer's fetch, the replica's own ``fetch``), so a 2 MiB answer crosses the socket
rather than Ray's object store (5.9 ms a call there, most of it fixed: docs/performance.md).

Ray's call to an async actor takes 0.68 ms one way on these machines (1.45 ms p99; a sync
actor's 0.47 ms), most of a produce's end-to-end latency once consumers read the leader's files
(docs/performance.md). A Unix socket's round trip is ~10 us. The replica runs the same
``produce`` for both transports, so acknowledgements, idempotence, leases and errors do not
depend on which one carried the batch.

The socket is in Linux's abstract namespace (a name, no file, nothing on the network; other
OSes get no channel and use Ray calls). Abstract sockets have no permissions and every local
user can list their names (/proc/net/unix), so the channel admits only what Ray would: the
replica makes a random 32-byte secret when it starts and hands it out, with the name, only
through ``read_location``, an actor call Ray's token guards; a connection must present it first,
and must come from the replica's own user (SO_PEERCRED). Anything else is closed unread.

Frames, little-endian:

    hello:    4s magic "RLPC" | u16 version 2 | 32s secret            (once, client first)
    request:  u32 length | u32 request id | i8 acks | i32 leader epoch (-1: none) | i32 timeout ms | batch
    fetch:    u32 20 | u32 request id | i8 FETCH (2) | i32 leader epoch (-1: none) | i32 0 |
              i64 offset | i32 max bytes | i32 max wait ms | i32 min bytes
    response: u32 length | u32 request id | msgpack body

A response body is ``[0, produce's (or fetch's) response tuple]`` or ``[1, error class name, args,
attributes]`` (raylog errors carry only plain strings and numbers); requests are answered as they
complete, in any order, matched by id. A fetch is always a consumer's (replica id -1): a
follower's fetch moves the leader's view of its progress, and is not a same-node peer's to make.
A connection that breaks fails every request still waiting on it with ReplicaNotAvailableError
(retriable): the producer retries those batches, by sequence, at whoever leads.

Bounds (a replica must not run out of memory or descriptors whatever a peer does): a request
longer than the topic's max_message_bytes, or a fetch of another length than its 20 bytes, closes
the connection before its bytes are read (a fetch's answer is as large as its max bytes, as by
Ray call); at most MAX_IN_FLIGHT requests per connection are read and not yet answered (beyond
that the replica stops reading it); responses wait for the peer to take them (``drain``); the
bytes of requests read and not yet answered stay under BUFFERED_BYTES_MAX per replica; at most
MAX_CONNECTIONS connections, each closed after IDLE_TIMEOUT_S without a request, or
HELLO_TIMEOUT_S without its hello.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import os
import socket
import struct
import sys
import threading
from collections import deque
from concurrent.futures import Future
from typing import Awaitable, Callable

import msgpack

from raylog import errors

HELLO = struct.Struct("<4sH32s")
HELLO_MAGIC = b"RLPC"
HELLO_VERSION = 2
SECRET_BYTES = 32
REQUEST = struct.Struct("<IIbii")
FETCH = 2
"""A request's acks field for a fetch (a produce's acks are -1, 0 or 1)."""
FETCH_REQUEST = struct.Struct("<qiii")
"""A fetch's body: offset, max bytes, max wait ms, min bytes."""
RESPONSE = struct.Struct("<II")
_PEERCRED = struct.Struct("3i")
"""struct ucred: pid, uid, gid."""

MAX_CONNECTIONS = 64
"""Connections one replica serves at once: a producer process opens one per partition it leads here."""
MAX_IN_FLIGHT = 8
"""Requests read from one connection and not answered yet (a producer keeps at most 5 per partition)."""
BUFFERED_BYTES_MAX = 64 * 1024 * 1024
"""Bytes of requests read and not yet answered, over all of a replica's connections (one request
larger than that is still taken alone)."""
IDLE_TIMEOUT_S = 300.0
HELLO_TIMEOUT_S = 5.0

available = sys.platform.startswith("linux")
"""Abstract Unix sockets are Linux's."""


def socket_name(topic_id: str, partition: int, replica_id: int, pid: int) -> str:
    """The abstract name a replica listens on ("@" for the leading NUL, as ``ss`` shows it)."""
    return f"@raylog/{topic_id}/{partition}/{replica_id}/{pid}"


def _address(name: str) -> str:
    return "\0" + name[1:]


ProduceFn = Callable[[bytes, int, "int | None", int], Awaitable[tuple]]
FetchFn = Callable[[int, int, int, int, "int | None"], Awaitable[tuple]]
"""(offset, max bytes, max wait ms, min bytes, leader epoch or None) -> fetch's response tuple."""


class _ByteBudget:
    """Bytes taken by requests in memory; ``take`` waits while taking more would pass the limit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Condition()

    async def take(self, n: int) -> None:
        async with self._freed:
            await self._freed.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n

    async def give(self, n: int) -> None:
        async with self._freed:
            self.used -= n
            self._freed.notify_all()


class ProduceChannelServer:
    """The replica's side: answers produce requests on its event loop with ``produce``, and fetch
    requests with ``fetch`` (None: a fetch closes the connection). Not thread-safe: everything
    runs on that loop."""

    def __init__(self, name: str, produce: ProduceFn, max_request_bytes: Callable[[], int],
                 fetch: FetchFn | None = None):
        self.name = name
        self.secret = os.urandom(SECRET_BYTES)
        self._produce = produce
        self._fetch = fetch
        self._max_request_bytes = max_request_bytes
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self._budget: _ByteBudget | None = None
        self._starting = asyncio.Lock()
        self._closed = False
        self.refused = 0
        """Connections closed unread: no secret, another user, over a bound."""

    async def start(self) -> None:
        """Listen, once: concurrent callers (read_location calls overlap) wait for the first."""
        async with self._starting:
            if self._server is None and not self._closed:
                self._budget = _ByteBudget(BUFFERED_BYTES_MAX)
                server = await asyncio.start_unix_server(self._serve, path=_address(self.name))
                if self._closed:  # closed while it bound: it must not listen on
                    server.close()
                    raise OSError(f"the produce channel {self.name} closed while it started")
                self._server = server

    async def close(self) -> None:
        """Stop listening and drop every connection (their waiting requests fail over)."""
        self._closed = True
        if self._server is not None:
            server, self._server = self._server, None
            # A connection asyncio accepted but has not attached yet when its server closes is
            # dropped unclosed (Server._attach asserts), its client left waiting: stop accepting,
            # let those attach (_admits refuses them now), then close.
            for sock in server.sockets:
                asyncio.get_running_loop().remove_reader(sock.fileno())
            await asyncio.sleep(0)
            server.close()
        for writer in list(self._connections):
            writer.close()

    def _admits(self, writer: asyncio.StreamWriter) -> bool:
        """Whether a new connection may say hello: room for it, and a peer of this replica's user."""
        if self._closed or len(self._connections) >= MAX_CONNECTIONS:
            return False
        sock = writer.get_extra_info("socket")
        try:
            _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        except (OSError, AttributeError, struct.error):
            return False
        return uid == os.getuid()

    async def _hello(self, reader: asyncio.StreamReader) -> bool:
        try:
            magic, version, secret = HELLO.unpack(await asyncio.wait_for(reader.readexactly(HELLO.size),
                                                                         HELLO_TIMEOUT_S))
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return False
        return magic == HELLO_MAGIC and version == HELLO_VERSION and hmac.compare_digest(secret, self.secret)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admits(writer):
            self.refused += 1
            writer.close()
            return
        # Counted (and closed by close()) while it says hello: a close() then must not leave it to
        # queue requests on a replica that went away.
        self._connections.add(writer)
        if not await self._hello(reader) or self._closed:
            self._connections.discard(writer)
            self.refused += 1
            writer.close()
            return
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        sending = asyncio.Lock()
        try:
            while True:
                await slots.acquire()
                head = await asyncio.wait_for(reader.readexactly(REQUEST.size), IDLE_TIMEOUT_S)
                length, request_id, acks, epoch, timeout_ms = REQUEST.unpack(head)
                epoch = None if epoch < 0 else epoch
                if acks == FETCH:
                    if self._fetch is None or length != FETCH_REQUEST.size:
                        self.refused += 1
                        break
                    offset, max_bytes, max_wait_ms, min_bytes = FETCH_REQUEST.unpack(await reader.readexactly(length))
                    call, held = self._fetch(offset, max_bytes, max_wait_ms, min_bytes, epoch), 0
                else:
                    if length > self._max_request_bytes():
                        self.refused += 1
                        break  # not a batch this topic takes: drop the connection, never buffer it
                    await self._budget.take(length)
                    try:
                        records = await reader.readexactly(length)
                    except BaseException:
                        await self._budget.give(length)
                        raise
                    call, held = self._produce(records, acks, epoch, timeout_ms), length
                    del records
                task = asyncio.get_running_loop().create_task(self._answer(
                    writer, sending, slots, request_id, call, held, "fetch" if acks == FETCH else "produce"))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, sending: asyncio.Lock, slots: asyncio.Semaphore,
                      request_id: int, call: Awaitable[tuple], held_bytes: int, what: str) -> None:
        """Answers one request with ``call``'s outcome; ``held_bytes`` of the byte budget are the
        request's, given back once it is done."""
        try:
            try:
                body = [0, list(await call)]
            except errors.RaylogError as exc:
                body = [1, type(exc).__name__, list(exc.args), _plain_attributes(exc)]
            except Exception as exc:  # noqa: BLE001 - a bug in the replica: reported, the connection lives on
                body = [1, "ActorCallError", [f"{what} failed with {type(exc).__name__}: {exc}"], {}]
            finally:
                del call
                if held_bytes:
                    await self._budget.give(held_bytes)
            payload = msgpack.packb(body, use_bin_type=True)
            del body
            async with sending:
                if not writer.is_closing():
                    writer.write(RESPONSE.pack(len(payload), request_id))
                    writer.write(payload)
                    await writer.drain()  # a peer that reads nothing holds this slot, not the replica's memory
        except ConnectionError:
            pass
        finally:
            slots.release()


def _plain_attributes(exc: BaseException) -> dict:
    return {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None)))}


def _error(name: str, args: list, attributes: dict) -> errors.RaylogError:
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.RaylogError)):
        return errors.ActorCallError(f"produce failed with {name}: {args}")
    exc = cls.__new__(cls)
    exc.args = tuple(args)
    exc.__dict__.update(attributes)
    return exc


class ProduceChannel:
    """The producer's side: one connection to one replica. ``produce`` queues a request and returns
    a Future at once; a writer thread sends (only it ever blocks on the socket, so a replica that
    stops reading holds up no one else) and a reader thread completes the Futures. Thread-safe."""

    def __init__(self, name: str, secret: bytes, timeout_s: float = 5.0):
        self.name = name
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(_address(name))
            self._sock.sendall(HELLO.pack(HELLO_MAGIC, HELLO_VERSION, secret))
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending: dict[int, Future] = {}
        self._outgoing: deque[tuple[bytes, object]] = deque()
        self._ids = itertools.count(1)
        self.broken: BaseException | None = None
        for target, thread_name in ((self._write_requests, "raylog-produce-channel-writer"),
                                    (self._read_responses, "raylog-produce-channel-reader")):
            threading.Thread(target=target, name=thread_name, daemon=True).start()

    def produce(self, records, acks: int, leader_epoch: int | None, timeout_ms: int) -> Future:
        """Queue one batch; the Future gets produce's response tuple or its raylog error. The buffer
        is sent as it is when its turn comes: the caller leaves it alone until the Future is done."""
        return self._request(acks, leader_epoch, timeout_ms, records)

    def fetch(self, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int,
              leader_epoch: int | None) -> Future:
        """Queue a consumer's fetch; the Future gets fetch's response tuple (records, high
        watermark, log start, log end) or its raylog error."""
        return self._request(FETCH, leader_epoch, 0, FETCH_REQUEST.pack(offset, max_bytes, max_wait_ms, min_bytes))

    def _request(self, acks: int, leader_epoch: int | None, timeout_ms: int, body) -> Future:
        future: Future = Future()
        with self._lock:
            if self.broken is not None:
                future.set_exception(self.broken)
                return future
            request_id = next(self._ids) & 0xFFFFFFFF
            self._pending[request_id] = future
            head = REQUEST.pack(len(body), request_id, acks, -1 if leader_epoch is None else leader_epoch,
                                timeout_ms)
            self._outgoing.append((head, body))
            self._ready.notify()
        return future

    @property
    def pending(self) -> int:
        """Requests sent or queued and not answered yet."""
        return len(self._pending)

    def close(self) -> None:
        """Fail every request not answered yet and end both threads."""
        with self._lock:
            self._break(None)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _break(self, cause: BaseException | None) -> None:
        """Fail every request still waiting (called with the lock held)."""
        if self.broken is None:
            why = f": {cause}" if cause is not None else ""
            self.broken = errors.ReplicaNotAvailableError(f"the produce channel to {self.name} closed{why}")
        waiting, self._pending = self._pending, {}
        self._outgoing.clear()
        self._ready.notify_all()
        for future in waiting.values():
            if not future.done():
                future.set_exception(self.broken)

    def _write_requests(self) -> None:
        while True:
            with self._lock:
                while not self._outgoing and self.broken is None:
                    self._ready.wait()
                if self.broken is not None:
                    return
                head, records = self._outgoing.popleft()
            try:
                self._sock.sendall(head)
                self._sock.sendall(records)
            except OSError as exc:
                with self._lock:
                    self._break(exc)
                return

    def _read_responses(self) -> None:
        sock = self._sock
        try:
            while True:
                head = _recv_exactly(sock, RESPONSE.size)
                length, request_id = RESPONSE.unpack(head)
                body = msgpack.unpackb(_recv_exactly(sock, length), raw=False)
                # Made sense of before the request is taken off the waiting ones: an answer that
                # makes none breaks the channel, which fails the request with the others.
                result = tuple(body[1]) if body[0] == 0 else _error(body[1], body[2], body[3])
                with self._lock:
                    future = self._pending.pop(request_id, None)
                if future is None or future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - whatever ends the reader breaks the channel, visibly
            with self._lock:
                self._break(exc)


def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    # Into one buffer: a fetch's answer is megabytes, and joining chunks would copy it again.
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError("the replica closed the channel")
        got += k
    return buf
