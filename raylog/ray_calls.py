"""The one place Ray's errors become raylog's: every client call goes through ``get``."""

from __future__ import annotations

import re
import time
import weakref
from typing import Any, Callable, TypeVar

import ray
import ray._private.worker as ray_worker
import ray.exceptions as rex

from raylog.errors import (
    ActorCallError, KafkaTimeoutError, RaylogError, RaySessionEndedError, ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)

T = TypeVar("T")
RETRY_BACKOFF_S = 0.1


def translate(exc: BaseException) -> BaseException:
    """The raylog error a Ray error stands for: the actor's own raylog error, unwrapped.

    Ray raises an actor's exception as ``RayTaskError(TheError)``, a class that is
    both a RayTaskError and TheError, whose message carries Ray's stack and
    colour codes; the raylog error the actor raised is its ``cause``. Any other
    cause is a bug in the actor, reported as ActorCallError naming the actor and
    the call. Exceptions that are not Ray's pass through unchanged.
    """
    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, RaylogError):
            return cause
        if isinstance(cause, (rex.RayActorError, rex.ActorUnavailableError)):
            return ReplicaNotAvailableError(_plain(str(cause)))
        return _actor_call_error(exc, cause)
    if isinstance(exc, RaylogError):
        return exc
    if isinstance(exc, rex.GetTimeoutError):
        return KafkaTimeoutError(_plain(str(exc)))
    if isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError, rex.ActorUnschedulableError)):
        return ReplicaNotAvailableError(_plain(str(exc)))
    if isinstance(exc, rex.RayError):
        return ActorCallError(f"Ray failed a raylog call: {type(exc).__name__}: {_plain(str(exc))}")
    return exc


def _actor_call_error(exc: "rex.RayTaskError", cause: BaseException | None) -> ActorCallError:
    # The instance ray.get raises keeps only its message, which starts "ray::Actor.method() (pid=N, ...".
    text = _plain(str(exc))
    found = _CALL.search(text)
    call, pid = (found.group(1), found.group(2)) if found else ("a raylog actor call", "?")
    what = f"{type(cause).__name__}: {cause}" if cause is not None else "an unknown error"
    return ActorCallError(f"{call} (actor process pid {pid}) failed with {_plain(what)}; this is a raylog bug, "
                          "the actor's stack is in .remote_traceback", text)


_CALL = re.compile(r"ray::([\w.]+)\(\)\s*\(pid=(\d+)")


def _plain(text: str) -> str:
    """Text without the ANSI colour codes Ray puts in its messages."""
    return _ANSI.sub("", text)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def get(refs: Any, timeout_s: float | None = None) -> Any:
    """ray.get that raises raylog errors."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except rex.RayError as exc:
        raise translate(exc) from None


def forget(ref: "ray.ObjectRef") -> None:
    """Stop waiting for a call: its answer, whenever it comes, is dropped, an error included (Ray
    would otherwise log it as unhandled)."""
    ref.future().add_done_callback(lambda done: done.exception())


def with_retries(call: Callable[[], T], timeout_s: float, on_retry: Callable[[], None] | None = None) -> T:
    """``call()`` again after each retriable raylog error (a leader moving, a new leader not yet able
    to answer) until it succeeds or ``timeout_s`` has passed; ``on_retry()`` runs before each retry
    (a metadata refresh). The last error is raised when time runs out, as Kafka's clients do within
    default.api.timeout.ms. A topic or partition that does not exist is not waited for."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except RaylogError as exc:
            if not exc.retriable or isinstance(exc, UnknownTopicOrPartitionError) \
                    or time.monotonic() + RETRY_BACKOFF_S > deadline:
                raise
        if on_retry is not None:
            on_retry()
        time.sleep(RETRY_BACKOFF_S)


class Session:
    """The Ray session a client was made in, told from any later one.

    A client checks it before it calls Ray unasked (a sender or heartbeat thread) or at the start
    of a call: after ray.shutdown() Ray's ``.remote()`` would start a new local Ray instance on
    its own, and after a new ray.init() the old session's actor handles name nothing. Ray keeps
    one Node object per connection (worker.node, reset to None at shutdown); the session is that
    object's identity, held weakly so it never keeps a shut-down connection's state alive.
    """

    __slots__ = ("_node",)

    def __init__(self) -> None:
        node = ray_worker.global_worker.node
        self._node = weakref.ref(node) if node is not None else None

    def alive(self) -> bool:
        if self._node is None:
            # No Node object: a Ray Client connection (ray://), whose end is all that can be told.
            return ray.is_initialized()
        node = self._node()
        return node is not None and ray_worker.global_worker.node is node

    def check(self) -> None:
        """RaySessionEndedError once the session has ended."""
        if not self.alive():
            raise self.ended()

    @staticmethod
    def ended() -> RaySessionEndedError:
        return RaySessionEndedError("the Ray session this client was made in has ended (ray.shutdown()); "
                                    "make a new one after raylog.connect()")
