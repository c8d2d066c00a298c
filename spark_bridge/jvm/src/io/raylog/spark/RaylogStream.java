package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
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
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.streaming.CheckpointFileManager;
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
final class RaylogStream implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  private static final Logger LOG = LoggerFactory.getLogger(RaylogStream.class);
  static final String INITIAL_OFFSETS_FILE = "raylog-initial-offsets.json";
  static final int WARNINGS_KEPT = 1000;

  private final SourceOptions options;
  private final String[] columns;
  private final String checkpointLocation;
  private RaylogOffset availableNow;
  private RaylogOffset latestSeen;
  /** The losses already logged (each once; forgotten past WARNINGS_KEPT). */
  private final java.util.Set<String> warned = new java.util.HashSet<>();
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
      // Spark's own checkpoint file manager, as the Kafka source's HDFSMetadataLog: written
      // atomically on any Hadoop filesystem (a rename where the store has one, else its own way).
      CheckpointFileManager files = CheckpointFileManager.create(new Path(checkpointLocation),
          SparkSession.active().sessionState().newHadoopConf());
      if (files.exists(file)) {
        try (InputStream in = files.open(file)) {
          return RaylogOffset.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        }
      }
      JsonNode answer = RayCalls.planner(options.namespace, "start_offsets", options.plannerJson());
      warn(answer);
      RaylogOffset start = RaylogOffset.of(answer.get("offsets"));
      files.mkdirs(new Path(checkpointLocation));
      CheckpointFileManager.CancellableFSDataOutputStream out = files.createAtomic(file, false);
      try {
        out.write(start.json().getBytes(StandardCharsets.UTF_8));
        out.close();
      } catch (IOException | RuntimeException e) {
        out.cancel();
        throw e;
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
    // Where each partition carries on and what was lost getting there (a log truncated or diverged
    // below the stream, a topic re-created or deleted, records removed) are the planner's one
    // decision (raylog.ranges.place), an error here when failOnDataLoss is on.
    JsonNode answer = RayCalls.planner(options.namespace, "next_offsets", options.plannerJson(), start.json());
    warn(answer);
    RaylogOffset begins = RaylogOffset.of(answer.get("start"));
    RaylogOffset latest = RaylogOffset.of(answer.get("latest"));
    latestSeen = latest;
    TreeMap<String, TreeMap<Integer, Long>> from = new TreeMap<>();
    TreeMap<String, TreeMap<Integer, Long>> until = new TreeMap<>();
    long total = 0;
    for (Map.Entry<String, TreeMap<Integer, Long>> t : latest.offsets.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        String topic = t.getKey();
        int partition = p.getKey();
        long begin = begins.get(topic, partition);
        long end = p.getValue();
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
    // Each end keeps the epoch of the record before it where the planner knows it (the high
    // watermark, or an unmoved start); an end cut short by a read limit has none.
    RaylogOffset end = new RaylogOffset(new TreeMap<>(), new TreeMap<>(), latest.ids);
    for (Map.Entry<String, TreeMap<Integer, Long>> t : until.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        String topic = t.getKey();
        int partition = p.getKey();
        long at = p.getValue();
        long epoch = at == latest.get(topic, partition) ? latest.epoch(topic, partition)
            : at == begins.get(topic, partition) ? begins.epoch(topic, partition) : -1;
        end.put(topic, partition, at, epoch);
      }
    }
    return end;
  }

  /**
   * Each loss once per stream: a trigger that finds no new data re-plans from the same offset and
   * finds the same loss again until a batch moves past it (the chaos run logged one ten times).
   */
  private void warn(JsonNode answer) {
    for (JsonNode w : answer.path("warnings")) {
      if (warned.size() > WARNINGS_KEPT) {
        warned.clear();
      }
      if (warned.add(w.asText())) {
        LOG.warn("raylog stream: {} (failOnDataLoss=false)", w.asText());
      }
    }
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

  /** The Kafka source's lag metrics in each progress report: how far the last batch's end is
   *  behind the latest offsets seen, per partition (min, max, avg). */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    if (latestSeen == null || !latestConsumedOffset.isPresent()) {
      return Map.of();
    }
    RaylogOffset consumed = (RaylogOffset) latestConsumedOffset.get();
    long min = Long.MAX_VALUE;
    long max = 0;
    long sum = 0;
    int n = 0;
    for (Map.Entry<String, TreeMap<Integer, Long>> t : latestSeen.offsets.entrySet()) {
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        Long at = consumed.get(t.getKey(), p.getKey());
        long behind = Math.max(0, p.getValue() - (at == null ? 0 : at));
        min = Math.min(min, behind);
        max = Math.max(max, behind);
        sum += behind;
        n++;
      }
    }
    if (n == 0) {
      return Map.of();
    }
    return Map.of("minOffsetsBehindLatest", Long.toString(min), "maxOffsetsBehindLatest", Long.toString(max),
        "avgOffsetsBehindLatest", Double.toString((double) sum / n));
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    JsonNode answer = RayCalls.planner(options.namespace, "plan_between", options.plannerJson(),
        ((RaylogOffset) start).json(), ((RaylogOffset) end).json());
    warn(answer);
    List<RangePartition> ranges = RaylogScanBuilder.ranges(answer.get("ranges"));
    return ranges.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaders(options.namespace, columns, options.failOnDataLoss, false, new String[0]);
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
