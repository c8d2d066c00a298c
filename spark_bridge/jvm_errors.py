"""raylog's errors raised in Spark's JVM, raised again in Python as raylog's own types.

The connector raises ``io.raylog.spark.RaylogSparkException`` with the message
"<raylog error class>: <message>"; pyspark hands Python a Py4JJavaError or one of its captured
exception types whose text carries that line (a task's failure wraps it in Spark's job
failure). ``raylog_errors()`` finds the first such line and raises the raylog error it names,
so ``spark_bridge`` callers catch ``RaylogError`` as they do with the rest of raylog.
"""

from __future__ import annotations

import contextlib
import re

from raylog import errors

_LINE = re.compile(r"io\.raylog\.spark\.RaylogSparkException: (\w+): ([^\n]*)")


def raylog_error(exc: BaseException) -> errors.RaylogError | None:
    """The raylog error a Spark exception carries, or None."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        text += "\n" + str(java)
    found = _LINE.search(text)
    return None if found is None else named(found.group(1), found.group(2))


def named(class_name: str, message: str) -> errors.RaylogError:
    """The raylog error of class ``class_name`` (RaylogError itself for a name raylog does not have)."""
    kind = getattr(errors, class_name, None)
    if not (isinstance(kind, type) and issubclass(kind, errors.RaylogError)):
        kind = errors.RaylogError
    return kind(message)


@contextlib.contextmanager
def raylog_errors():
    """Raise a Spark exception that carries a raylog error as that error (chained to it)."""
    try:
        yield
    except Exception as exc:
        err = raylog_error(exc)
        if err is None:
            raise
        raise err from exc
