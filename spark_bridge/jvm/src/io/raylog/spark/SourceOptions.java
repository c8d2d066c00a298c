package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
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

  final TreeMap<String, String> forPlanner = new TreeMap<>();
  final String namespace;
  final boolean includeHeaders;
  final boolean failOnDataLoss;
  final long maxOffsetsPerTrigger;
  final long minOffsetsPerTrigger;
  final long maxTriggerDelayMs;
  final String pinnedRanges;
  private final Pattern subscribePattern;

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
      } else {
        forPlanner.put(k, e.getValue());
      }
    }
    this.subscribePattern = javaPattern(lower.get("subscribepattern"));
    // Checked once, by the planner (raylog.ranges.parse_options, as for the Python API); what the
    // JVM uses of them comes back checked.
    TreeMap<String, String> toCheck = new TreeMap<>(forPlanner);
    if (subscribePattern != null) {
      toCheck.put("subscribepattern", "(?!)");  // Java's regex, checked above; Python's would differ
    }
    JsonNode checked = RayCalls.planner(namespace, "read_options", jsonOf(toCheck), pinnedRanges != null);
    this.includeHeaders = checked.get("include_headers").asBoolean();
    this.failOnDataLoss = checked.get("fail_on_data_loss").asBoolean();
    this.maxOffsetsPerTrigger = checked.get("max_offsets_per_trigger").asLong();
    this.minOffsetsPerTrigger = checked.get("min_offsets_per_trigger").asLong();
    this.maxTriggerDelayMs = checked.get("max_trigger_delay_ms").asLong();
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

  /** The options for the planner. subscribePattern is a Java regex, as in Spark's Kafka source:
   *  it is matched here against the topics that exist now, and the planner gets the names it
   *  matched (as a pattern of those names, so topics that appear later are picked up next time). */
  String plannerJson() {
    TreeMap<String, String> options = forPlanner;
    if (subscribePattern != null) {
      StringBuilder names = new StringBuilder();
      for (JsonNode t : RayCalls.planner(namespace, "topics").path("topics")) {
        if (subscribePattern.matcher(t.asText()).matches()) {
          names.append(names.length() == 0 ? "" : "|").append(t.asText().replace(".", "\\.").replace("-", "\\-"));
        }
      }
      options = new TreeMap<>(forPlanner);
      options.put("subscribepattern", names.length() == 0 ? "(?!)" : "(?:" + names + ")");
    }
    return jsonOf(options);
  }

  private static String jsonOf(Map<String, String> options) {
    try {
      return RayCalls.JSON.writeValueAsString(options);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  private static Pattern javaPattern(String regex) {
    if (regex == null) {
      return null;
    }
    try {
      return Pattern.compile(regex);
    } catch (PatternSyntaxException e) {
      throw new RaylogSparkException("InvalidConfigError", "subscribePattern is not a Java regular expression: "
          + e.getMessage());
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
}
