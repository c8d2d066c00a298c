package io.raylog.spark;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A write's columns (Spark's Kafka sink: value, and optionally key, topic, partition, headers,
 * plus raylog's timestamp) and producer settings, checked on the driver so a wrong column fails
 * before any task runs and nothing is written.
 */
final class SinkSpec implements Serializable {
  private static final Logger LOG = LoggerFactory.getLogger(SinkSpec.class);
  static final String BYTES = "binary or string";
  /** Bytes gathered per partition before a batch is sent. Measured (bench/spark_bench.py, 5 M rows):
   *  4 MiB wrote 1.17-1.18 M records/s against 0.94-1.11 M with 1 MiB (fewer produce calls for the
   *  replicas' Python); 16 MiB gained nothing more. Capped by the topic's max_message_bytes. */
  static final long DEFAULT_BATCH_BYTES = 4L * 1024 * 1024;
  /** Kafka's buffer.memory: what a task's open batches may hold together (a keyed write to many
   *  partitions otherwise holds a batch.size batch for each: 1 GiB at 256 partitions). */
  static final long DEFAULT_BUFFER_MEMORY = 32L * 1024 * 1024;

  final String namespace;
  final String topic;
  final int value;
  final int key;
  final int topicColumn;
  final int partition;
  final int headers;
  final int timestamp;
  final boolean stringValue;
  final boolean stringKey;
  final boolean headersAsMap;
  final boolean timestampAsLong;
  final boolean timestampAsInt;
  final int acks;
  final boolean lz4;
  final long batchSize;
  final long timeoutMs;
  final long bufferMemory;

  SinkSpec(StructType schema, Map<String, String> options, String namespace) {
    Map<String, String> opts = new TreeMap<>();
    options.forEach((k, v) -> opts.put(k.toLowerCase(Locale.ROOT).replace("_", "").replace(".", ""), v));
    this.namespace = namespace;
    String t = options.entrySet().stream().filter(e -> e.getKey().equalsIgnoreCase("topic")).map(Map.Entry::getValue)
        .findFirst().orElse(null);
    this.topic = t;
    int v = index(schema, "value");
    if (v < 0) {
      throw invalid("no 'value' column (" + BYTES + ") to write; the columns are "
          + String.join(", ", schema.fieldNames()));
    }
    this.value = v;
    this.key = index(schema, "key");
    this.topicColumn = topic == null ? index(schema, "topic") : -1;
    if (topic == null && topicColumn < 0) {
      throw invalid("no topic to write to: give the 'topic' option or a 'topic' column (string)");
    }
    this.partition = index(schema, "partition");
    this.headers = index(schema, "headers");
    this.timestamp = timestampColumn(schema);
    this.stringValue = check(schema, value, "value");
    this.stringKey = key >= 0 && check(schema, key, "key");
    if (topicColumn >= 0 && schema.fields()[topicColumn].dataType() != DataTypes.StringType) {
      throw wrongType(schema, topicColumn, "string");
    }
    if (partition >= 0 && !(schema.fields()[partition].dataType() instanceof IntegerType)) {
      throw wrongType(schema, partition, "int");
    }
    this.headersAsMap = headers >= 0 && checkHeaders(schema);
    this.timestampAsLong = timestamp >= 0 && checkTimestamp(schema);
    this.timestampAsInt = timestampAsLong && schema.fields()[timestamp].dataType() instanceof IntegerType;
    String acksOption = opts.getOrDefault("acks", "all");
    switch (acksOption.toLowerCase(Locale.ROOT)) {
      case "all":
      case "-1":
        acks = -1;
        break;
      case "1":
        acks = 1;
        break;
      case "0":
        acks = 0;
        break;
      default:
        throw new RaylogSparkException("InvalidConfigError", "acks must be 0, 1 or 'all' (-1), got '" + acksOption + "'");
    }
    String codec = opts.getOrDefault("compressiontype", "lz4").toLowerCase(Locale.ROOT);
    codec = codec.equals("null") || codec.isEmpty() ? "none" : codec;
    if (!codec.equals("lz4") && !codec.equals("none")) {
      throw new RaylogSparkException("InvalidConfigError", "compression_type must be 'lz4' or 'none', got '" + codec
          + "'");
    }
    this.lz4 = codec.equals("lz4");
    this.batchSize = SourceOptions.positive(opts.getOrDefault("batchsize", String.valueOf(DEFAULT_BATCH_BYTES)),
        "batch_size");
    this.timeoutMs = SourceOptions.positive(opts.getOrDefault("deliverytimeoutms", "120000"), "delivery_timeout_ms");
    this.bufferMemory = SourceOptions.positive(opts.getOrDefault("buffermemory",
        String.valueOf(DEFAULT_BUFFER_MEMORY)), "buffer_memory");
    for (String k : options.keySet()) {
      String lower = k.toLowerCase(Locale.ROOT);
      if (lower.startsWith("kafka.")) {
        LOG.warn("raylog: option {} is ignored (a Kafka client setting; raylog writes through its replicas' actors)",
            k);
      }
    }
  }

  private static int index(StructType schema, String name) {
    String[] names = schema.fieldNames();
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  /** True for a string column, false for binary; else the error naming it. */
  private static boolean check(StructType schema, int i, String name) {
    DataType t = schema.fields()[i].dataType();
    if (t == DataTypes.StringType) {
      return true;
    }
    if (t == DataTypes.BinaryType) {
      return false;
    }
    throw wrongType(schema, i, BYTES);
  }

  private boolean checkHeaders(StructType schema) {
    DataType t = schema.fields()[headers].dataType();
    if (t instanceof MapType && ((MapType) t).keyType() == DataTypes.StringType
        && ((MapType) t).valueType() == DataTypes.BinaryType) {
      return true;
    }
    if (t instanceof ArrayType && ((ArrayType) t).elementType() instanceof StructType) {
      StructType s = (StructType) ((ArrayType) t).elementType();
      if (s.fields().length == 2 && s.fieldNames()[0].equals("key") && s.fieldNames()[1].equals("value")
          && s.fields()[0].dataType() == DataTypes.StringType && s.fields()[1].dataType() == DataTypes.BinaryType) {
        return false;
      }
    }
    throw wrongType(schema, headers, "array<struct<key: string, value: binary>> or map<string, binary>");
  }

  /** raylog's timestamp column, or -1: a column of that name of another type is ignored, as
   *  Spark's Kafka sink ignores every column it does not know (a Kafka job's DataFrame often
   *  carries the source's timestamp along as it came, or as a string). */
  private static int timestampColumn(StructType schema) {
    int i = index(schema, "timestamp");
    if (i < 0) {
      return -1;
    }
    DataType t = schema.fields()[i].dataType();
    if (t == DataTypes.TimestampType || t instanceof LongType || t instanceof IntegerType) {
      return i;
    }
    LOG.warn("raylog: column 'timestamp' is {}, not timestamp or long (ms): ignored, records get the send time",
        t.simpleString());
    return -1;
  }

  private boolean checkTimestamp(StructType schema) {
    DataType t = schema.fields()[timestamp].dataType();
    return t instanceof LongType || t instanceof IntegerType;
  }

  private static RaylogSparkException wrongType(StructType schema, int i, String expected) {
    return invalid("column '" + schema.fieldNames()[i] + "' must be " + expected + ", got "
        + schema.fields()[i].dataType().simpleString() + "; nothing was written");
  }

  static RaylogSparkException invalid(String message) {
    return new RaylogSparkException("InvalidRecordError", message);
  }
}
