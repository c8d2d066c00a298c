package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.exception.RayTimeoutException;
import io.ray.api.function.PyActorMethod;
import java.io.IOException;
import java.io.Serializable;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.TaskContext;
import org.apache.spark.TaskKilledException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a Spark task runs for one RangePartition: on the leader's Ray node, reads the leader's
 * segment files (LocalSegments, 8 MiB at a time); elsewhere, or when those decline, fetches from
 * the partition leader's actor (its fetch_bytes, 8 MiB per call, the next call sent before the
 * current bytes are decoded); until
 * the range's end, following the leader through elections, and hands Spark one ColumnarBatch
 * per record batch. A range is read completely or the task fails: records removed meanwhile
 * fail it unless failOnDataLoss is off (then they are skipped with a warning), and a leader
 * absent for {@link #STALL_TIMEOUT_MS} fails it. Under COUNT(*) pushdown a task answers rows:
 * grouped by nothing, topic or partition, one, the range's size from its offsets, after checking
 * its records are still there; grouped by key as well, a count per key of the records it reads.
 */
final class RangeReaders implements PartitionReaderFactory {
  private static final Logger LOG = LoggerFactory.getLogger(RangeReaders.class);
  static final int FETCH_BYTES = 8 * 1024 * 1024;
  /** A task's first fetch is small: nothing can overlap its wait, while every later fetch is sent
   *  as soon as the one before it arrives and overlaps Spark's work on that one. */
  static final int FIRST_FETCH_BYTES = 1024 * 1024;
  static final int FETCH_WAIT_MS = 500;
  static final long STALL_TIMEOUT_MS = 120_000;
  static final long BACKOFF_MS = 200;
  static final long AWAIT_STEP_MS = 500;
  /** Spark's own root allocator (ArrowUtils), so decoded batches count where Spark's Arrow does. */
  static final BufferAllocator ROOT = ArrowUtils.rootAllocator();

  private final String namespace;
  private final String[] columns;
  private final boolean failOnDataLoss;
  private final boolean countOnly;
  /** Under COUNT(*) pushdown, the columns it is grouped by (of key, topic and partition), in the
   *  order its rows give them before the count. */
  private final String[] grouping;

  RangeReaders(String namespace, String[] columns, boolean failOnDataLoss, boolean countOnly, String[] grouping) {
    this.namespace = namespace;
    this.columns = columns;
    this.failOnDataLoss = failOnDataLoss;
    this.countOnly = countOnly;
    this.grouping = grouping;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return !countOnly;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    if (!countOnly) {
      throw new IllegalStateException("raylog reads are columnar; rows only answer COUNT(*)");
    }
    RangePartition r = (RangePartition) partition;
    if (countsKeys(grouping)) {
      return new KeyCountReader(r, new ColumnarReader(r, new Leader(namespace, r), new String[] {"key"},
          failOnDataLoss), grouping);
    }
    return new CountReader(r, new Leader(namespace, r), failOnDataLoss, grouping);
  }

  /** Whether COUNT(*) so grouped is counted in the tasks as they read the keys (else it is
   *  answered per range from offsets). */
  static boolean countsKeys(String[] grouping) {
    return java.util.Arrays.asList(grouping).contains("key");
  }

  /** A row of grouped COUNT(*): the range's value of each grouping column, then the count. */
  static InternalRow countRow(String[] grouping, RangePartition range, byte[] key, long count) {
    Object[] values = new Object[grouping.length + 1];
    for (int i = 0; i < grouping.length; i++) {
      switch (grouping[i]) {
        case "key":
          values[i] = key;
          break;
        case "topic":
          values[i] = UTF8String.fromString(range.topic);
          break;
        case "partition":
          values[i] = range.partition;
          break;
        default:
          throw new IllegalArgumentException("COUNT(*) is not grouped by " + grouping[i]);
      }
    }
    values[grouping.length] = count;
    return new GenericInternalRow(values);
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    RangePartition r = (RangePartition) partition;
    return new ColumnarReader(r, new Leader(namespace, r), columns, failOnDataLoss);
  }

  /** The partition's leader actor, looked up again (through the planner) after it failed a call. */
  static final class Leader implements Serializable {
    final String namespace;
    final RangePartition range;
    private transient PyActorHandle handle;
    private transient String name;
    /** Where the leader's files are when it runs on this task's Ray node (else null), and its epoch. */
    transient String localDirectory;
    transient int epoch = -1;
    private long stalledSince = -1;
    private boolean failedOnce;

    Leader(String namespace, RangePartition range) {
      this.namespace = namespace;
      this.range = range;
    }

    PyActorHandle get() {
      checkInterrupted();
      if (handle == null) {
        // The leader the plan found first (no call to the planner per task), the planner's
        // current answer after a failure.
        RangePartition.Leader found = range.leader != null && !failedOnce ? range.leader
            : RangePartition.Leader.of(RayCalls.planner(namespace, "leader", range.topic, range.partition));
        name = found.name;
        handle = name.isEmpty() ? null : RayCalls.actor(name, namespace);
        epoch = found.epoch;
        String node = found.rayNodeId;
        String directory = found.directory;
        localDirectory = !node.isEmpty() && !directory.isEmpty()
            && node.equals(Ray.getRuntimeContext().getCurrentNodeId().toString()) ? directory : null;
      }
      return handle;
    }

    /** A task Spark killed (a cancelled job, a speculative copy no longer needed) stops at once:
     *  Spark sets the task's flag, and interrupts its thread only when asked to. */
    void checkInterrupted() {
      TaskContext task = TaskContext.get();
      if (Thread.currentThread().isInterrupted() || (task != null && task.isInterrupted())) {
        throw new TaskKilledException("raylog read of " + range.describe() + " cancelled");
      }
    }

    /** After a retriable failure: forget the handle (a replica Ray restarts under the same name
     *  needs a new one), wait, and fail once stalled too long. */
    void failed(String why, long read) {
      handle = null;
      failedOnce = true;
      if (name != null && !name.isEmpty()) {
        RayCalls.forget(name, namespace);
      }
      waited(why, read);
      pause(BACKOFF_MS);
    }

    /** A call's answer, waited for in short steps so a killed task stops within a second rather
     *  than when the call times out (Ray's get is not interruptible); RayTimeoutException after
     *  {@code timeoutMs}. */
    Object await(ObjectRef<Object> ref, long timeoutMs) {
      long deadline = System.currentTimeMillis() + timeoutMs;
      while (true) {
        checkInterrupted();
        long left = deadline - System.currentTimeMillis();
        try {
          return ref.get(Math.max(1, Math.min(AWAIT_STEP_MS, left)));
        } catch (RayTimeoutException e) {
          if (left <= AWAIT_STEP_MS) {
            throw e;
          }
        }
      }
    }

    void pause(long ms) {
      try {
        Thread.sleep(ms);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      checkInterrupted();
    }

    /** A call that brought nothing new (a leader whose high watermark is behind the range's end):
     *  fails once nothing has come for STALL_TIMEOUT_MS. */
    void waited(String why, long read) {
      checkInterrupted();
      long now = System.currentTimeMillis();
      if (stalledSince < 0) {
        stalledSince = now;
      } else if (now - stalledSince > STALL_TIMEOUT_MS) {
        throw new RaylogSparkException("KafkaTimeoutError", range.topic + "-" + range.partition + ": read " + read
            + " of the range [" + range.from + ", " + range.until + ") and no more for " + STALL_TIMEOUT_MS / 1000
            + "s (" + why + "); not returning part of it");
      }
    }

    void progressed() {
      stalledSince = -1;
    }

    /** The part of [offset, until) the log still holds, as the planner decides it for every read
     *  (raylog.ranges.place: records removed, a log truncated or diverged, a topic re-created):
     *  {from, until}, what was lost logged; with failOnDataLoss a loss fails the task instead. */
    long[] readable(long offset, long until, boolean failOnDataLoss) {
      JsonNode answer = RayCalls.planner(namespace, "remaining", range.topic, range.partition, offset, until,
          range.untilEpoch, range.topicId, failOnDataLoss);
      for (JsonNode w : answer.path("warnings")) {
        LOG.warn("{}: {} (failOnDataLoss=false)", range.describe(), w.asText());
      }
      return new long[] {answer.get("from").asLong(), answer.get("until").asLong()};
    }
  }

  static final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    private final RangePartition range;
    private final Leader leader;
    private final boolean failOnDataLoss;
    private final BatchDecoder decoder;
    private final BufferAllocator allocator;
    private BatchDecoder.Decoded current;
    /** The fetched bytes being read, their batches, and the next one to decode: one batch is
     *  inflated at a time, so a task holds one batch's columns, not a whole fetch's. */
    private byte[] bytes;
    private List<BatchDecoder.Header> headers;
    private int nextHeader;
    private long offset;
    private ObjectRef<Object> ahead;
    private long aheadOffset = -1;
    private long fetchWaitNs;
    private long decodeNs;
    private long fetchedBytes;
    private long records;
    private LocalSegments local;
    private String localDirectory;
    /** Where the range ends: its planned end, or less once the planner found the log lost the rest. */
    private long end;

    ColumnarReader(RangePartition range, Leader leader, String[] columns, boolean failOnDataLoss) {
      this.range = range;
      this.leader = leader;
      this.failOnDataLoss = failOnDataLoss;
      this.allocator = ROOT.newChildAllocator(range.describe(), 0, Long.MAX_VALUE);
      this.decoder = new BatchDecoder(range.topic, range.partition, columns, allocator);
      this.offset = range.from;
      this.end = range.until;
    }

    @Override
    public boolean next() {
      if (current != null) {
        current.close();
        current = null;
      }
      while (true) {
        while (headers != null && nextHeader < headers.size()) {
          BatchDecoder.Header h = headers.get(nextHeader++);
          if (h.baseOffset >= end) {
            offset = end;  // compaction left nothing more in the range
            break;
          }
          if (h.nextOffset <= offset) {
            continue;
          }
          if (range.untilEpoch >= 0 && h.leaderEpoch > range.untilEpoch) {
            // A leader later than the one that wrote the range's last record wrote inside it: the
            // log diverged from what was planned (an unclean election); the planner says where.
            String why = "a batch of leader epoch " + h.leaderEpoch + " at " + h.baseOffset;
            if (!recheck()) {
              leader.failed(why, offset - range.from);
            }
            headers = null;
            break;
          }
          long began = System.nanoTime();
          BatchDecoder.Decoded d = decoder.decode(bytes, h, offset, end);
          decodeNs += System.nanoTime() - began;
          offset = Math.max(offset, h.nextOffset);
          if (d != null) {
            current = d;
            records += d.batch.numRows();
            return true;
          }
        }
        headers = null;
        bytes = null;
        if (offset >= end) {
          return false;
        }
        fetch();
      }
    }

    @Override
    public ColumnarBatch get() {
      return current.batch;
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return ReadMetrics.values(fetchWaitNs / 1_000_000, decodeNs / 1_000_000, fetchedBytes, records,
          decoder.inflatedBytes());
    }

    private ObjectRef<Object> call(long at) {
      PyActorHandle actor = leader.get();
      if (actor == null) {
        return null;
      }
      int size = fetchedBytes == 0 ? FIRST_FETCH_BYTES : FETCH_BYTES;
      // At the leader epoch the controller gave: only the partition's current leader answers, so a
      // log end below the range's is a log that lost records, not a deposed leader behind.
      return actor.task(PyActorMethod.of("fetch_bytes", Object.class), at, size, FETCH_WAIT_MS, leader.epoch)
          .remote();
    }

    /** The log changed under the range (records gone, its end below the range's, a later leader's
     *  batch inside it): the planner says what is still to be read. False when nothing changed: the
     *  caller backs off and reads again (a leader that moved meanwhile), failing once stalled. */
    private boolean recheck() {
      long[] part = leader.readable(offset, end, failOnDataLoss);
      long from = Math.max(offset, part[0]);
      long until = Math.min(end, part[1]);
      if (from == offset && until == end) {
        return false;
      }
      offset = from;
      end = Math.max(from, until);
      headers = null;
      bytes = null;
      ahead = null;
      return true;
    }

    /** On the leader's node: its batches from {@code offset}, read from its files (empty while its
     *  high watermark is below the range's end); null when they must be fetched instead. */
    private byte[] readLocally() {
      if (ahead != null || leader.get() == null || leader.localDirectory == null) {
        return null;
      }
      long began = System.nanoTime();
      try {
        if (local != null && !leader.localDirectory.equals(localDirectory)) {
          local.close();
          local = null;
        }
        if (local == null) {
          local = new LocalSegments(leader.localDirectory);
          localDirectory = leader.localDirectory;
        }
        return local.read(offset, FETCH_BYTES, leader.epoch);
      } catch (IOException e) {
        leader.localDirectory = null;  // not readable here after all: fetch
        return null;
      } finally {
        fetchWaitNs += System.nanoTime() - began;
      }
    }

    /** One fetch from {@code offset}: its batches become the ones to decode; the fetch after it is
     *  sent at once, so the leader reads and ships it while this one is decoded. */
    private void fetch() {
      byte[] read = readLocally();
      if (read != null) {
        List<BatchDecoder.Header> found = BatchDecoder.headers(read);
        if (found.isEmpty()) {
          if (local.logEnd < end) {
            if (!recheck()) {
              leader.failed("the log ends at " + local.logEnd + ", below the range's end", offset - range.from);
            }
            return;
          }
          leader.waited("the leader's high watermark " + local.highWatermark + " is below the range's end",
              offset - range.from);
          leader.pause(1);
          return;
        }
        leader.progressed();
        fetchedBytes += read.length;
        bytes = read;
        headers = found;
        nextHeader = 0;
        return;
      }
      if (local != null && leader.localDirectory == null) {
        local.close();
        local = null;
      }
      RayCalls.FetchReply answer;
      long began = System.nanoTime();
      try {
        ObjectRef<Object> ref = ahead != null && aheadOffset == offset ? ahead : call(offset);
        ahead = null;
        if (ref == null) {
          leader.failed("the partition has no leader", offset - range.from);
          return;
        }
        answer = new RayCalls.FetchReply(leader.await(ref, FETCH_WAIT_MS + 60_000L));
      } catch (RaylogSparkException e) {
        throw e;
      } catch (RuntimeException e) {
        ahead = null;
        leader.failed(String.valueOf(e.getMessage()), offset - range.from);
        return;
      } finally {
        fetchWaitNs += System.nanoTime() - began;
      }
      RayCalls.ReplicaError error = answer.error;
      if (error != null) {
        if (error.type.equals("OffsetOutOfRangeError")) {
          if (!recheck()) {
            leader.failed(error.message, offset - range.from);
          }
          return;
        }
        if (!error.retriable) {
          throw error.raise();
        }
        leader.failed(error.message, offset - range.from);
        return;
      }
      byte[] fetched = answer.records;
      List<BatchDecoder.Header> found = BatchDecoder.headers(fetched);
      if (found.isEmpty()) {
        // Below the range's end: the high watermark of a new leader catching up (ask again), or,
        // when the current leader's log itself ends below it, records lost (the planner decides).
        long logEnd = answer.logEnd;
        if (logEnd < end) {
          if (!recheck()) {
            leader.failed("the log ends at " + logEnd + ", below the range's end", offset - range.from);
          }
          return;
        }
        leader.waited("the leader's high watermark " + answer.highWatermark + " is below the range's end",
            offset - range.from);
        return;
      }
      leader.progressed();
      fetchedBytes += fetched.length;
      long next = Math.max(offset, found.get(found.size() - 1).nextOffset);
      if (next < end && leader.localDirectory == null) {
        try {
          ahead = call(next);
          aheadOffset = next;
        } catch (RuntimeException e) {
          ahead = null;
        }
      }
      bytes = fetched;
      headers = found;
      nextHeader = 0;
    }

    @Override
    public void close() {
      // Each step runs whatever the one before threw: the allocator is Spark's to account.
      try {
        if (current != null) {
          current.close();
          current = null;
        }
      } finally {
        try {
          if (local != null) {
            local.close();
          }
        } finally {
          // Ray's Java API cannot free an object: the prefetched answer leaves Ray's object store
          // when the JVM collects its reference, dropped here.
          ahead = null;
          allocator.close();
        }
      }
    }
  }

  /** COUNT(*) of a range from its offsets, once the leader shows its records are still there,
   *  after the range's topic and partition when grouped by them. */
  static final class CountReader implements PartitionReader<InternalRow> {
    private final RangePartition range;
    private final Leader leader;
    private final boolean failOnDataLoss;
    private final String[] grouping;
    private InternalRow row;

    CountReader(RangePartition range, Leader leader, boolean failOnDataLoss, String[] grouping) {
      this.range = range;
      this.leader = leader;
      this.failOnDataLoss = failOnDataLoss;
      this.grouping = grouping;
    }

    @Override
    public boolean next() {
      if (row != null) {
        return false;
      }
      if (range.until <= range.from) {
        // Nothing to read: ungrouped, a zero, so Spark's sum is not NULL; grouped, no group.
        row = countRow(grouping, range, null, 0L);
        return grouping.length == 0;
      }
      while (true) {
        RayCalls.FetchReply answer;
        try {
          PyActorHandle actor = leader.get();
          if (actor == null) {
            leader.failed("the partition has no leader", 0);
            continue;
          }
          answer = new RayCalls.FetchReply(leader.await(actor.task(PyActorMethod.of("log_bounds", Object.class),
              range.from, leader.epoch).remote(), 60_000L));
        } catch (RaylogSparkException e) {
          throw e;
        } catch (RuntimeException e) {
          leader.failed(String.valueOf(e.getMessage()), 0);
          continue;
        }
        RayCalls.ReplicaError error = answer.error;
        if (error != null && !error.type.equals("OffsetOutOfRangeError")) {
          if (!error.retriable) {
            throw error.raise();
          }
          leader.failed(error.message, 0);
          continue;
        }
        long start = range.from;
        long until = range.until;
        if (error != null || answer.logEnd < range.until) {
          // Records gone, or the log ending below the range: count what the planner says is left.
          long[] part = leader.readable(range.from, range.until, failOnDataLoss);
          start = part[0];
          until = Math.min(range.until, part[1]);
        }
        long count = Math.max(0, until - start);
        row = countRow(grouping, range, null, count);
        return count > 0 || grouping.length == 0;
      }
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() {}
  }

  /** COUNT(*) grouped by key (and the range's topic or partition): the range's records read as
   *  any other read of their keys, counted per key as they are decoded ({@link KeyCounts}), and
   *  handed to Spark, which sums each key's counts, whenever the counts held are full and at the
   *  range's end. */
  static final class KeyCountReader implements PartitionReader<InternalRow> {
    private final RangePartition range;
    private final ColumnarReader records;
    private final String[] grouping;
    private final KeyCounts counts = new KeyCounts();
    private KeyCounts.Drained drained;
    private int at;
    private boolean done;

    KeyCountReader(RangePartition range, ColumnarReader records, String[] grouping) {
      this.range = range;
      this.records = records;
      this.grouping = grouping;
    }

    @Override
    public boolean next() {
      if (drained != null && ++at < drained.size) {
        return true;
      }
      drained = null;
      while (!done && !counts.full()) {
        if (!records.next()) {
          done = true;
          break;
        }
        ColumnarBatch batch = records.get();
        ColumnVector keys = batch.column(0);
        if (keys instanceof ComputedColumns.Binary) {
          ((ComputedColumns.Binary) keys).countInto(counts);
        } else {  // BatchDecoder.binary gives a batch whose keys are all null one constant null column
          counts.addNulls(batch.numRows());
        }
      }
      if (counts.isEmpty()) {
        return false;
      }
      drained = counts.drain();
      at = 0;
      return true;
    }

    @Override
    public InternalRow get() {
      return countRow(grouping, range, drained.keys[at], drained.counts[at]);
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return records.currentMetricsValues();
    }

    @Override
    public void close() {
      records.close();
    }
  }
}
