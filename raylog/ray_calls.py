"""The one place Ray's errors become raylog's: every client call goes through ``get``."""

from __future__ import annotations

from typing import Any

import ray
import ray.exceptions as rex

from raylog.errors import KafkaTimeoutError, RaylogError, ReplicaNotAvailableError


def translate(exc: BaseException) -> BaseException:
    """The raylog error a Ray error stands for: the actor's own raylog error, unwrapped.

    Ray raises an actor's exception as ``RayTaskError(TheError)``, a class that is
    both a RayTaskError and TheError, whose message carries Ray's stack and
    colour codes; the raylog error the actor raised is its ``cause``.
    """
    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, RaylogError):
            return cause
        if isinstance(cause, (rex.RayActorError, rex.ActorUnavailableError)):
            return ReplicaNotAvailableError(str(cause))
        return exc
    if isinstance(exc, RaylogError):
        return exc
    if isinstance(exc, rex.GetTimeoutError):
        return KafkaTimeoutError(str(exc))
    if isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError, rex.ActorUnschedulableError)):
        return ReplicaNotAvailableError(str(exc))
    return exc


def get(refs: Any, timeout_s: float | None = None) -> Any:
    """ray.get that raises raylog errors."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except rex.RayError as exc:
        raise translate(exc) from None
