"""Spark on the Ray cluster through RayDP, set up for raylog, and a stop that always returns.

``session()`` starts Spark with ``raydp.init_spark`` (or reuses the one running) with the
raylog connector on its classpath (spark.jars: spark_bridge/jvm/raylog-spark.jar, built by
``make jar``), raylog's namespace for it (spark.raylog.namespace) and its planner actor
running (spark_bridge/planner.py); loopback-only listeners (driver bind address and host
127.0.0.1, no UI); the driver's interpreter for Spark's Python workers (PYSPARK_PYTHON); and
the ``--add-opens`` flags Java 17 needs on the driver, the executors and RayDP's app master
(without them the Spark <-> Ray Dataset hand-off fails with InaccessibleObjectException;
measured and listed in DESIGN.md). The driver's JVM logs through spark_bridge/conf/log4j2.properties to
spark-driver.log in Ray's log directory (WARN and above also to the terminal), and so do
the INFO lines Ray's native client in that JVM writes to stderr. The connector's JVM side calls raylog's actors from the
driver (which RayDP connects to Ray) and from the executors (Ray Java workers); Spark's Python
workers never join Ray. Starting takes about 10 s here.

``stop()`` waits a bounded time for ``raydp.stop_spark()`` (which once hung for minutes in
py4j after a failed job), then kills what is left: RayDP's actors and the driver's JVM.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from pathlib import Path

import ray

from raylog.errors import ClusterNotAvailableError, InvalidConfigError
from raylog.logs import get_logger
from spark_bridge.planner import ensure_planner

log = get_logger(__name__)

JAVA_17_OPENS = [
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.nio.charset",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.util.regex", "java.math", "java.text",
    "java.time", "java.security", "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar",
    "jdk.internal.misc", "jdk.internal.ref",
]
"""Packages java.base must open to unnamed modules for Spark 3.5 and RayDP on Java 17."""
STOP_TIMEOUT_S = 60.0
MASTER_GONE_TIMEOUT_S = 30.0
"""How long stop() waits for RayDP's app master actor to be gone (a kill is asynchronous)."""
CONNECTOR_JAR = Path(__file__).parent / "jvm" / "raylog-spark.jar"
DRIVER_LOG4J2 = Path(__file__).parent / "conf" / "log4j2.properties"
"""The driver JVM's log4j2 configuration: INFO and above to spark-driver.log in Ray's log directory,
WARN and above to the console (without it, RayDP names a file that does not exist, log4j prints
"Reconfiguration failed" and Spark its default configuration's banner)."""
RAY_NATIVE_INFO = re.compile(rb"^\[\d{4}-\d\d-\d\d [\d:,]+ [DI] \d+ \d+\] ")
"""A debug or info line of Ray's C++ client (``[2026-11-23 22:55:15,635 I 7958 8019] gcs_client.cc:96:
...``): RayDP connects the driver's JVM to Ray, whose client writes these to stderr before it
has a log file."""
"""The Spark connector (format "raylog"), built by ``make jar`` from spark_bridge/jvm."""

MIN_SPARK = (3, 3)
"""The oldest Spark the connector runs on: it implements SupportsTriggerAvailableNow (3.3) and
pushes COUNT(*) down through SupportsPushDownAggregates; pyproject's pyspark bound says the same."""

_current: "Session | None" = None


def check_spark_version(version: str) -> None:
    """InvalidConfigError (not retriable: this environment never works) for a pyspark older than
    MIN_SPARK, before any JVM starts (the connector would fail later, with a NoClassDefFoundError
    from deep inside a query)."""
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < MIN_SPARK:
        raise InvalidConfigError(f"the raylog Spark connector needs Spark {'.'.join(map(str, MIN_SPARK))} "
                                       f"or later; this pyspark is {version}")


class Session:
    """Spark on Ray for raylog. Behaves as the SparkSession it wraps (``.spark``) and is a context
    manager that stops Spark on exit; ``spark_bridge.read`` and friends take either."""

    def __init__(self, spark, namespace: str, app_name: str = "raylog"):
        self.spark = spark
        self.namespace = namespace
        self.app_name = app_name
        self._stopped = False

    def __getattr__(self, name: str):
        return getattr(self.spark, name)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop Spark and RayDP's actors; returns within about ``timeout_s`` + a few seconds even if
        RayDP hangs (its JVM and actors are then killed)."""
        global _current
        if self._stopped:
            return
        self._stopped = True
        if _current is self:
            _current = None
        import raydp

        def stop_spark():
            try:
                raydp.stop_spark()
            except Exception as exc:  # noqa: BLE001 - after a forced stop its JVM is gone
                log.debug("raydp.stop_spark() failed: %r", exc)

        stopper = threading.Thread(target=stop_spark, name="raylog-spark-stop", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            log.warning("raydp.stop_spark() did not return within %.0fs; killing Spark's JVM and RayDP's actors",
                        timeout_s)
            _kill_raydp_actors()
        _end_driver_jvm(self.spark)
        _wait_master_gone(self.app_name, MASTER_GONE_TIMEOUT_S)


def _wait_master_gone(app_name: str, timeout_s: float) -> None:
    """Until RayDP's app master actor of ``app_name`` is gone from Ray (a kill takes effect after
    the call returns), so a new session of the same name can start at once (before, its
    init_spark failed with ActorAlreadyExistsError: the chaos run's stream restart hit it)."""
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and ray.is_initialized():
        try:
            ray.get_actor(app_name + RAYDP_SPARK_MASTER_SUFFIX)
        except ValueError:
            return
        time.sleep(0.1)
    log.warning("RayDP's app master of %r is still alive %.0fs after Spark stopped", app_name, timeout_s)


def _kill_raydp_actors() -> None:
    """Kill RayDP's app master actor (its executors are Java actors it owns, so Ray ends them with
    it) and its placement group."""
    from raydp import context as raydp_context

    context = raydp_context._global_spark_context
    cluster = getattr(context, "_spark_cluster", None)
    master = getattr(cluster, "_spark_master_handle", None)
    if master is not None:
        try:
            ray.kill(master, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass
    placement_group = getattr(context, "_placement_group", None)
    if placement_group is not None:
        ray.util.remove_placement_group(placement_group)


def _end_driver_jvm(spark) -> None:
    """End the driver's JVM and forget it, so the next session starts a new one. pyspark would keep
    the gateway JVM for the next SparkContext, but RayDP connected that JVM to this Ray cluster,
    which the process may shut down and replace (a whole-cluster restart), and a JVM that hung in
    stop_spark must go anyway."""
    from raydp import context as raydp_context

    gateway = getattr(spark.sparkContext, "_gateway", None)
    if gateway is not None:
        try:
            gateway.shutdown()  # its connections and callback server first, so no call is cut mid-way
        except Exception:  # noqa: BLE001 - the JVM is gone already
            pass
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.kill()
            proc.wait()
    raydp_context._global_spark_context = None
    raydp_context._reset_pyspark_singletons()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = SparkSession._activeSession = None


def session(app_name: str = "raylog", num_executors: int = 1, executor_cores: int = 1,
            executor_memory: str = "1g", configs: dict | None = None, namespace: str = "raylog") -> Session:
    """Spark on this Ray cluster (started here if this process has no Ray yet, as raylog.connect
    does), reused if one is running. ``configs`` adds Spark settings."""
    global _current
    if _current is not None and not _current._stopped:
        return _current
    if not ray.is_initialized():
        import raylog

        raylog.connect(namespace=namespace)
    if not CONNECTOR_JAR.exists():
        raise ClusterNotAvailableError(f"the Spark connector {CONNECTOR_JAR} is not built: run 'make jar' (it needs "
                                       "the JDK's javac, which the README requires)")
    import pyspark

    check_spark_version(pyspark.__version__)
    ensure_planner(namespace)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    opens = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in JAVA_17_OPENS)
    logs_dir = ray._private.worker.global_worker.node.get_logs_dir_path()
    settings = {
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"{opens} -Draylog.log.dir={logs_dir}",
        # RayDP passes this to the driver JVM as -Dlog4j2.configurationFile.
        "spark.log4j.config.file.name": str(DRIVER_LOG4J2),
        "spark.executor.extraJavaOptions": opens,
        "spark.ray.raydp_app_master.extraJavaOptions": opens,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
        # RayDP connects the driver's JVM to Ray (its fault-tolerant mode, on by default): the
        # connector plans there, and its executors are Ray Java workers already.
        "spark.raylog.namespace": namespace,
        **(configs or {}),
    }
    jars = [str(CONNECTOR_JAR)] + [j for j in settings.get("spark.jars", "").split(",") if j]
    settings["spark.jars"] = ",".join(dict.fromkeys(jars))
    import raydp

    with _jvm_stderr_filtered(os.path.join(logs_dir, "spark-driver.log")):
        spark = raydp.init_spark(app_name, num_executors, executor_cores, executor_memory, configs=settings)
    _current = Session(spark, namespace, app_name)
    return _current


@contextlib.contextmanager
def _jvm_stderr_filtered(log_path: str):
    """While the driver's JVM starts, stderr (file descriptor 2, which the JVM inherits for good)
    is a pipe: a thread passes every line to the real stderr except Ray's native INFO lines,
    which it appends to ``log_path``. Python's own stderr goes through the same relay meanwhile."""
    try:
        terminal = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:  # no stderr to filter (a daemon): start the JVM as it is
        yield
        return

    def relay() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe, os.fdopen(terminal, "wb", buffering=0) as out:
            log = None
            for line in iter(pipe.readline, b""):
                if RAY_NATIVE_INFO.match(line):
                    try:
                        log = log or open(log_path, "ab", buffering=0)
                        log.write(line)
                    except OSError:
                        pass
                    continue
                try:
                    out.write(line)
                except OSError:
                    pass
            if log is not None:
                log.close()

    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=relay, name="raylog-jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def spark_of(spark_or_session):
    """The pyspark SparkSession, from a Session or a SparkSession."""
    return spark_or_session.spark if isinstance(spark_or_session, Session) else spark_or_session
