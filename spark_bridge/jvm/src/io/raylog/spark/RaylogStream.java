package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A micro-batch stream over raylog topics, as Spark's Kafka source: Spark writes each batch's
 * end offsets to its checkpoint before running it, and a batch re-run after a failure or a
 * restart reads exactly the same ranges (so a file sink gets each record once). The start
 * offsets chosen when the query first runs are kept in the checkpoint too, so a restart before
 * the first batch does not move them. Partitions added to a topic are read from their start.
 * Admission: maxOffsetsPerTrigger (shared by lag), minOffsetsPerTrigger with maxTriggerDelay,
 * and Trigger.AvailableNow (everything present when the query starts, in batches).
 */
final class RaylogStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private static final Logger LOG = LoggerFactory.getLogger(RaylogStream.class);
  static final String INITIAL_OFFSETS_FILE = "raylog-initial-offsets.json";

  private final SourceOptions options;
  private final String[] columns;
  private final String checkpointLocation;
  private RaylogOffset availableNow;
  private RaylogOffset latestSeen;
  /** When the last batch was let through (Kafka's lastTriggerMillis: 0, so a new query's first
   *  trigger is never held back by minOffsetsPerTrigger). */
  private long lastTriggerMs;

  RaylogStream(SourceOptions options, String[] columns, String checkpointLocation) {
    this.options = options;
    this.columns = columns;
    this.checkpointLocation = checkpointLocation;
  }

  @Override
  public Offset initialOffset() {
    Path file = new Path(checkpointLocation, INITIAL_OFFSETS_FILE);
    try {
      FileSystem fs = file.getFileSystem(SparkSession.active().sessionState().newHadoopConf());
      if (fs.exists(file)) {
        try (InputStream in = fs.open(file)) {
          return RaylogOffset.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        }
      }
      RaylogOffset start = RaylogOffset.of(
          RayCalls.planner(options.namespace, "start_offsets", options.plannerJson()).get("offsets"));
      Path tmp = new Path(checkpointLocation, "." + INITIAL_OFFSETS_FILE + ".tmp");
      fs.mkdirs(new Path(checkpointLocation));
      try (OutputStream out = fs.create(tmp, true)) {
        out.write(start.json().getBytes(StandardCharsets.UTF_8));
      }
      if (!fs.rename(tmp, file)) {
        throw new IOException("could not rename " + tmp + " to " + file);
      }
      LOG.info("raylog stream starts at {}", start.json());
      return start;
    } catch (IOException e) {
      throw new RaylogSparkException("KafkaStorageError", "the stream's start offsets in " + file + ": " + e, e);
    }
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is the one Spark calls");
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    ReadLimit max = options.maxOffsetsPerTrigger > 0 ? ReadLimit.maxRows(options.maxOffsetsPerTrigger) : null;
    ReadLimit min = options.minOffsetsPerTrigger > 0
        ? ReadLimit.minRows(options.minOffsetsPerTrigger, options.maxTriggerDelayMs) : null;
    if (max != null && min != null) {
      return ReadLimit.compositeLimit(new ReadLimit[] {min, max});
    }
    return max != null ? max : min != null ? min : ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNow = RaylogOffset.of(
        RayCalls.planner(options.namespace, "latest_offsets", options.plannerJson()).get("latest"));
    LOG.info("raylog stream: Trigger.AvailableNow reads up to {}", availableNow.json());
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    RaylogOffset start = (RaylogOffset) startOffset;
    JsonNode answer = RayCalls.planner(options.namespace, "latest_offsets", options.plannerJson());
    RaylogOffset latest = RaylogOffset.of(answer.get("latest"));
    RaylogOffset earliest = RaylogOffset.of(answer.get("earliest"));
    latestSeen = latest;
    TreeMap<String, TreeMap<Integer, Long>> from = new TreeMap<>();
    TreeMap<String, TreeMap<Integer, Long>> until = new TreeMap<>();
    long total = 0;
    for (Map.Entry<String, TreeMap<Integer, Long>> t : latest.offsets.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        String topic = t.getKey();
        int partition = p.getKey();
        long low = earliest.get(topic, partition);
        long high = p.getValue();
        Long begin = start.get(topic, partition);
        if (begin == null) {
          begin = low;  // a partition added since: from its start, as Kafka's source
        } else if (begin > high) {
          // The log ends before where the stream is: truncated (an unclean election) or re-created.
          String what = topic + "-" + partition + ": the stream is at offset " + begin + " but the log now ends at "
              + high + " (truncated or re-created)";
          if (options.failOnDataLoss) {
            throw new RaylogSparkException("OffsetOutOfRangeError", what + "; set failOnDataLoss=false to read it "
                + "from its start");
          }
          LOG.warn("raylog stream: {}; reading it from its start {} (failOnDataLoss=false)", what, low);
          begin = low;
        } else if (begin < low && !options.failOnDataLoss) {
          begin = low;  // retention removed [begin, low): the batch's limit counts what can be read
        }
        long end = high;
        if (availableNow != null) {
          Long cap = availableNow.get(topic, partition);
          end = cap == null ? begin : Math.min(end, cap);
        }
        end = Math.max(begin, end);
        from.computeIfAbsent(topic, k -> new TreeMap<>()).put(partition, begin);
        until.computeIfAbsent(topic, k -> new TreeMap<>()).put(partition, end);
        total += end - begin;
      }
    }
    long now = System.currentTimeMillis();
    ReadMinRows min = null;
    ReadMaxRows max = null;
    for (ReadLimit l : limit instanceof CompositeReadLimit ? ((CompositeReadLimit) limit).getReadLimits()
        : new ReadLimit[] {limit}) {
      if (l instanceof ReadMinRows) {
        min = (ReadMinRows) l;
      } else if (l instanceof ReadMaxRows) {
        max = (ReadMaxRows) l;
      }
    }
    if (min != null && availableNow == null) {  // AvailableNow reads everything, however few remain
      if (now - lastTriggerMs < min.maxTriggerDelayMs() && total < min.minRows()) {
        return start;  // too few records, and not waited long enough: no batch this trigger
      }
      lastTriggerMs = now;  // as Kafka's delayBatch: the delay counts from the last batch let through
    }
    if (max != null && total > max.maxRows()) {
      share(from, until, total, max.maxRows());
    }
    return new RaylogOffset(until);
  }

  /** Cuts each partition's share of {@code limit} records in proportion to its lag (Kafka's rateLimit). */
  private static void share(TreeMap<String, TreeMap<Integer, Long>> from, TreeMap<String, TreeMap<Integer, Long>> until,
      long total, long limit) {
    for (Map.Entry<String, TreeMap<Integer, Long>> t : until.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        long begin = from.get(t.getKey()).get(p.getKey());
        long lag = p.getValue() - begin;
        double prorate = limit * ((double) lag / total);
        long take = (long) (prorate < 1 ? Math.ceil(prorate) : Math.floor(prorate));
        p.setValue(Math.min(p.getValue(), begin + take));
      }
    }
  }

  @Override
  public Offset reportLatestOffset() {
    return latestSeen;
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    JsonNode answer = RayCalls.planner(options.namespace, "plan_between", options.plannerJson(),
        ((RaylogOffset) start).json(), ((RaylogOffset) end).json());
    for (JsonNode w : answer.path("warnings")) {
      LOG.warn("raylog stream: {}", w.asText());
    }
    List<RangePartition> ranges = RaylogScanBuilder.ranges(answer.get("ranges"));
    return ranges.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaders(options.namespace, columns, options.failOnDataLoss, false);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return RaylogOffset.parse(json);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
