package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ray.api.BaseActorHandle;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.call.PyActorTaskCaller;
import io.ray.api.function.PyActorMethod;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Calls from this JVM (Spark's driver or an executor, both Ray Java workers under RayDP) to
 * raylog's Python actors, across languages: the planner (spark_bridge/planner.py, JSON strings in
 * and out) and the partition replicas (fetch_bytes / produce_bytes, lists of bytes and ints).
 */
final class RayCalls {
  static final ObjectMapper JSON = new ObjectMapper();
  static final String PLANNER = "raylog-spark-planner";
  static final long PLANNER_TIMEOUT_MS = 120_000;

  private static final ConcurrentHashMap<String, PyActorHandle> ACTORS = new ConcurrentHashMap<>();

  private RayCalls() {}

  /** The named actor of {@code namespace}, or null when none has that name (now). */
  static PyActorHandle actor(String name, String namespace) {
    if (!Ray.isInitialized()) {
      throw new RaylogSparkException("ClusterNotAvailableError",
          "this JVM is not connected to Ray: start Spark with spark_bridge.session(), which connects "
              + "RayDP's driver and executors to the Ray cluster raylog runs on");
    }
    // Keyed by Ray node too: the driver's JVM outlives a Spark session, and the next session connects it
    // to Ray again; a handle from before is unknown to the new core worker, which aborts on it.
    String key = Ray.getRuntimeContext().getCurrentNodeId() + "\u0000" + namespace + "\u0000" + name;
    PyActorHandle found = ACTORS.get(key);
    if (found != null) {
      return found;
    }
    Optional<BaseActorHandle> handle = Ray.getActor(name, namespace);
    if (!handle.isPresent()) {
      return null;
    }
    PyActorHandle actor = (PyActorHandle) handle.get();
    ACTORS.put(key, actor);
    return actor;
  }

  static void forget(String name, String namespace) {
    ACTORS.keySet().removeIf(k -> k.endsWith("\u0000" + namespace + "\u0000" + name));
  }

  static void forgetHandle(PyActorHandle handle) {
    ACTORS.values().removeIf(h -> h == handle);
  }

  /** The planner's JSON answer to {@code method(args)}. A retriable raylog error (a leader moving)
   *  or a planner being restarted is retried for up to {@link #PLANNER_TIMEOUT_MS}, as Kafka's
   *  source retries its offset requests; any other raylog error is raised as RaylogSparkException. */
  static JsonNode planner(String namespace, String method, Object... args) {
    long deadline = System.currentTimeMillis() + PLANNER_TIMEOUT_MS;
    while (true) {
      String why;
      String errorClass = "KafkaTimeoutError";
      PyActorHandle planner = actor(PLANNER, namespace);
      if (planner == null) {
        throw new RaylogSparkException("ClusterNotAvailableError",
            "raylog's Spark planner actor '" + PLANNER + "' is not running in Ray namespace '" + namespace
                + "': start Spark with spark_bridge.session(namespace=...), which starts it");
      }
      try {
        // PyActorCall has no varargs overload: the caller takes the argument array as it is.
        ObjectRef<String> ref = new PyActorTaskCaller<>(planner, PyActorMethod.of(method, String.class), args).remote();
        JsonNode node = JSON.readTree(ref.get(PLANNER_TIMEOUT_MS));
        JsonNode error = node.get("error");
        if (error == null) {
          return node;
        }
        if (!error.path(2).asBoolean(false)) {
          throw new RaylogSparkException(error.get(0).asText(), error.get(1).asText());
        }
        errorClass = error.get(0).asText();
        why = error.get(1).asText();
      } catch (RaylogSparkException e) {
        throw e;
      } catch (java.io.IOException | RuntimeException e) {
        forget(PLANNER, namespace);  // Ray restarts a dead planner under the same name
        why = String.valueOf(e.getMessage());
      }
      if (System.currentTimeMillis() > deadline) {
        throw new RaylogSparkException(errorClass, why + " (raylog's Spark planner retried " + method + " for "
            + PLANNER_TIMEOUT_MS / 1000 + "s)");
      }
      try {
        Thread.sleep(200);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RaylogSparkException("KafkaTimeoutError", "interrupted while asking the planner " + method);
      }
    }
  }

  /** Where {@code name} is in a reply whose fields are {@code fields} (raylog.protocol's NamedTuple
   *  of the same names, in the same order: tests/unit/bridge/test_cross_language_replies.py). */
  private static int at(String[] fields, String name) {
    return java.util.Arrays.asList(fields).indexOf(name);
  }

  static long asLong(Object o) {
    return ((Number) o).longValue();
  }

  /** A replica's fetch_bytes answer (raylog.protocol.FetchBytesReply). */
  static final class FetchReply {
    static final String[] FIELDS = {"records", "high_watermark", "log_start", "log_end", "error"};
    final byte[] records;
    final long highWatermark;
    final long logStart;
    final long logEnd;
    /** Null when the fetch succeeded. */
    final ReplicaError error;

    FetchReply(Object answer) {
      Object[] a = (Object[]) answer;
      records = (byte[]) a[at(FIELDS, "records")];
      highWatermark = asLong(a[at(FIELDS, "high_watermark")]);
      logStart = asLong(a[at(FIELDS, "log_start")]);
      logEnd = asLong(a[at(FIELDS, "log_end")]);
      error = ReplicaError.of(a[at(FIELDS, "error")]);
    }
  }

  /** A replica's produce_bytes answer (raylog.protocol.ProduceBytesReply). */
  static final class ProduceReply {
    static final String[] FIELDS = {"base_offset", "error"};
    final long baseOffset;
    /** Null when the batch was appended. */
    final ReplicaError error;

    ProduceReply(Object answer) {
      Object[] a = (Object[]) answer;
      baseOffset = asLong(a[at(FIELDS, "base_offset")]);
      error = ReplicaError.of(a[at(FIELDS, "error")]);
    }
  }

  /** What a replica refused a fetch or produce with (raylog.protocol.ErrorReply: raylog's error,
   *  by class name). */
  static final class ReplicaError {
    static final String[] FIELDS = {"error_class", "message", "retriable", "log_start", "log_end"};
    final String type;
    final String message;
    final boolean retriable;
    final long logStart;
    final long logEnd;

    private ReplicaError(Object[] f) {
      type = (String) f[at(FIELDS, "error_class")];
      message = (String) f[at(FIELDS, "message")];
      retriable = asLong(f[at(FIELDS, "retriable")]) != 0;
      logStart = asLong(f[at(FIELDS, "log_start")]);
      logEnd = asLong(f[at(FIELDS, "log_end")]);
    }

    /** The error in a reply's error field, or null ([]: none). */
    static ReplicaError of(Object slot) {
      Object[] fields = (Object[]) slot;
      return fields == null || fields.length == 0 ? null : new ReplicaError(fields);
    }

    RaylogSparkException raise() {
      return new RaylogSparkException(type, message);
    }
  }
}
