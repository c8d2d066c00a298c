package io.raylog.spark;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A read's options, split by who uses them: the planner gets the Kafka source's offset options
 * (and checks them: raylog.ranges, the same code as the Python API); the JVM keeps the stream's
 * admission limits. Options of Kafka's client ({@code kafka.*}) and the Kafka source's own
 * consumer tuning are accepted and ignored with a warning, so a Kafka job runs unchanged.
 */
final class SourceOptions implements Serializable {
  private static final Logger LOG = LoggerFactory.getLogger(SourceOptions.class);
  static final String NAMESPACE_CONF = "spark.raylog.namespace";
  static final String PINNED_RANGES = "raylog.ranges";
  static final Set<String> KAFKA_SOURCE_TUNING = Set.of(
      "groupidprefix", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
      "topic");
  private static final Set<String> STREAM_ONLY = Set.of("maxoffsetspertrigger", "minoffsetspertrigger",
      "maxtriggerdelay");
  /** Kafka's default maxTriggerDelay, 15 minutes. */
  static final long DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000L;

  final TreeMap<String, String> forPlanner = new TreeMap<>();
  final String namespace;
  final boolean includeHeaders;
  final boolean failOnDataLoss;
  final long maxOffsetsPerTrigger;
  final long minOffsetsPerTrigger;
  final long maxTriggerDelayMs;
  final String pinnedRanges;

  SourceOptions(Map<String, String> options) {
    Map<String, String> lower = normalized(options);
    String ns = lower.remove("raylog.namespace");
    this.namespace = ns != null ? ns : namespaceOfSession();
    this.pinnedRanges = lower.remove(PINNED_RANGES);
    lower.remove("path");
    for (Map.Entry<String, String> e : lower.entrySet()) {
      String k = e.getKey();
      if (k.startsWith("kafka.") || KAFKA_SOURCE_TUNING.contains(k)) {
        LOG.warn("raylog: option {} is ignored (a Kafka client setting; raylog reads through its replicas' actors)",
            k);
      } else if (!STREAM_ONLY.contains(k)) {
        forPlanner.put(k, e.getValue());
      }
    }
    this.includeHeaders = flag(lower.get("includeheaders"), false, "includeHeaders");
    this.failOnDataLoss = flag(lower.get("failondataloss"), true, "failOnDataLoss");
    this.maxOffsetsPerTrigger = positive(lower.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger");
    this.minOffsetsPerTrigger = positive(lower.get("minoffsetspertrigger"), "minOffsetsPerTrigger");
    String delay = lower.get("maxtriggerdelay");
    this.maxTriggerDelayMs = delay == null ? DEFAULT_MAX_TRIGGER_DELAY_MS : durationMs(delay);
  }

  static String namespaceOfSession() {
    return SparkSession.active().conf().get(NAMESPACE_CONF, "raylog");
  }

  /** Spark lower-cases option names; raylog's Python API passes snake_case ones: both become
   *  "maxoffsetspertrigger" here. */
  static Map<String, String> normalized(Map<String, String> options) {
    Map<String, String> out = new TreeMap<>();
    options.forEach((k, v) -> out.put(k.toLowerCase(Locale.ROOT).replace("_", ""), v));
    return out;
  }

  /** Spark's Kafka source schema, with headers when asked. */
  StructType schema() {
    return schema(includeHeaders);
  }

  static StructType schema(boolean includeHeaders) {
    StructType s = new StructType()
        .add("key", DataTypes.BinaryType, true)
        .add("value", DataTypes.BinaryType, true)
        .add("topic", DataTypes.StringType, true)
        .add("partition", DataTypes.IntegerType, true)
        .add("offset", DataTypes.LongType, true)
        .add("timestamp", DataTypes.TimestampType, true)
        .add("timestampType", DataTypes.IntegerType, true);
    return includeHeaders ? s.add("headers", BatchDecoder.HEADERS_TYPE, true) : s;
  }

  String plannerJson() {
    try {
      return RayCalls.JSON.writeValueAsString(forPlanner);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  static boolean flag(String value, boolean otherwise, String name) {
    if (value == null) {
      return otherwise;
    }
    if (value.equalsIgnoreCase("true") || value.equalsIgnoreCase("false")) {
      return Boolean.parseBoolean(value);
    }
    throw new RaylogSparkException("InvalidConfigError", name + " must be true or false, got '" + value + "'");
  }

  static long positive(String value, String name) {
    if (value == null) {
      return -1;
    }
    try {
      long n = Long.parseLong(value.trim());
      if (n >= 1) {
        return n;
      }
    } catch (NumberFormatException e) {
      // the error below names it
    }
    throw new RaylogSparkException("InvalidConfigError", name + " must be a positive integer, got '" + value + "'");
  }

  /** Spark's duration strings ("15m", "3s", "500ms", a bare number of ms). */
  static long durationMs(String value) {
    try {
      return org.apache.spark.network.util.JavaUtils.timeStringAsMs(value.trim());
    } catch (NumberFormatException e) {
      throw new RaylogSparkException("InvalidConfigError", "maxTriggerDelay must be a duration like '15m', got '"
          + value + "'");
    }
  }
}
