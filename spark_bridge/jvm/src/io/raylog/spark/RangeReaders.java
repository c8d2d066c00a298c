package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.function.PyActorMethod;
import java.io.IOException;
import java.io.Serializable;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.vectorized.ColumnarBatch;
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
 * absent for {@link #STALL_TIMEOUT_MS} fails it. Under COUNT(*) pushdown a task answers one
 * row, the range's size, after checking its records are still there.
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
  static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);

  private final String namespace;
  private final String[] columns;
  private final boolean failOnDataLoss;
  private final boolean countOnly;

  RangeReaders(String namespace, String[] columns, boolean failOnDataLoss, boolean countOnly) {
    this.namespace = namespace;
    this.columns = columns;
    this.failOnDataLoss = failOnDataLoss;
    this.countOnly = countOnly;
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
    return new CountReader((RangePartition) partition, new Leader(namespace, (RangePartition) partition),
        failOnDataLoss);
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

    Leader(String namespace, RangePartition range) {
      this.namespace = namespace;
      this.range = range;
    }

    PyActorHandle get() {
      if (handle == null) {
        JsonNode found = RayCalls.planner(namespace, "leader", range.topic, range.partition);
        name = found.get("name").asText();
        handle = name.isEmpty() ? null : RayCalls.actor(name, namespace);
        epoch = found.path("epoch").asInt(-1);
        String node = found.path("ray_node_id").asText("");
        String directory = found.path("directory").asText("");
        localDirectory = !node.isEmpty() && !directory.isEmpty()
            && node.equals(Ray.getRuntimeContext().getCurrentNodeId().toString()) ? directory : null;
      }
      return handle;
    }

    /** After a retriable failure: forget the handle (a replica Ray restarts under the same name
     *  needs a new one), wait, and fail once stalled too long. */
    void failed(String why, long read) {
      handle = null;
      if (name != null && !name.isEmpty()) {
        RayCalls.forget(name, namespace);
      }
      waited(why, read);
      try {
        Thread.sleep(BACKOFF_MS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RaylogSparkException("KafkaTimeoutError", "interrupted while reading " + range.describe());
      }
    }

    /** A call that brought nothing new (a leader whose high watermark is behind the range's end):
     *  fails once nothing has come for STALL_TIMEOUT_MS. */
    void waited(String why, long read) {
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

    RaylogSparkException gone(long offset, RayCalls.ReplicaError e) {
      return new RaylogSparkException("OffsetOutOfRangeError", range.topic + "-" + range.partition + ": offset "
          + offset + " of the range [" + range.from + ", " + range.until + ") is gone (log start " + e.logStart
          + ", end " + e.logEnd + "); set failOnDataLoss=false to skip");
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

    ColumnarReader(RangePartition range, Leader leader, String[] columns, boolean failOnDataLoss) {
      this.range = range;
      this.leader = leader;
      this.failOnDataLoss = failOnDataLoss;
      this.allocator = ROOT.newChildAllocator(range.describe(), 0, Long.MAX_VALUE);
      this.decoder = new BatchDecoder(range.topic, range.partition, columns, allocator);
      this.offset = range.from;
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
          if (h.baseOffset >= range.until) {
            offset = range.until;  // compaction left nothing more in the range
            break;
          }
          if (h.nextOffset <= offset) {
            continue;
          }
          long began = System.nanoTime();
          BatchDecoder.Decoded d = decoder.decode(bytes, h, offset, range.until);
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
        if (offset >= range.until) {
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
      return ReadMetrics.values(fetchWaitNs / 1_000_000, decodeNs / 1_000_000, fetchedBytes, records);
    }

    private ObjectRef<Object> call(long at) {
      PyActorHandle actor = leader.get();
      if (actor == null) {
        return null;
      }
      int size = fetchedBytes == 0 ? FIRST_FETCH_BYTES : FETCH_BYTES;
      return actor.task(PyActorMethod.of("fetch_bytes", Object.class), at, size, FETCH_WAIT_MS).remote();
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
          leader.waited("the leader's high watermark " + local.highWatermark + " is below the range's end",
              offset - range.from);
          try {
            Thread.sleep(1);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
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
      Object[] answer;
      long began = System.nanoTime();
      try {
        ObjectRef<Object> ref = ahead != null && aheadOffset == offset ? ahead : call(offset);
        ahead = null;
        if (ref == null) {
          leader.failed("the partition has no leader", offset - range.from);
          return;
        }
        answer = (Object[]) ref.get(FETCH_WAIT_MS + 60_000L);
      } catch (RaylogSparkException e) {
        throw e;
      } catch (RuntimeException e) {
        ahead = null;
        leader.failed(String.valueOf(e.getMessage()), offset - range.from);
        return;
      } finally {
        fetchWaitNs += System.nanoTime() - began;
      }
      RayCalls.ReplicaError error = RayCalls.error(answer[4]);
      if (error != null) {
        if (error.type.equals("OffsetOutOfRangeError")) {
          if (!failOnDataLoss && offset < error.logStart) {
            LOG.warn("{}-{}: records {}..{} were removed while being read; skipping to {} (failOnDataLoss=false)",
                range.topic, range.partition, offset, error.logStart - 1, error.logStart);
            offset = error.logStart;
            return;
          }
          if (!failOnDataLoss && offset > error.logEnd && error.logEnd >= 0) {
            LOG.warn("{}-{}: the log now ends at {}, before {} (truncated or re-created); the range [{}, {}) ends "
                + "there (failOnDataLoss=false)", range.topic, range.partition, error.logEnd, offset, range.from,
                range.until);
            offset = range.until;
            return;
          }
          throw leader.gone(offset, error);
        }
        if (!error.retriable) {
          throw error.raise();
        }
        leader.failed(error.message, offset - range.from);
        return;
      }
      byte[] fetched = (byte[]) answer[0];
      List<BatchDecoder.Header> found = BatchDecoder.headers(fetched);
      if (found.isEmpty()) {
        // The high watermark is behind the range's end (a new leader catching up): ask again.
        leader.waited("the leader's high watermark " + RayCalls.asLong(answer[1]) + " is below the range's end",
            offset - range.from);
        return;
      }
      leader.progressed();
      fetchedBytes += fetched.length;
      long next = Math.max(offset, found.get(found.size() - 1).nextOffset);
      if (next < range.until && leader.localDirectory == null) {
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
      if (current != null) {
        current.close();
        current = null;
      }
      if (local != null) {
        local.close();
      }
      allocator.close();
    }
  }

  /** COUNT(*) of a range from its offsets, once the leader shows its records are still there. */
  static final class CountReader implements PartitionReader<InternalRow> {
    private final RangePartition range;
    private final Leader leader;
    private final boolean failOnDataLoss;
    private InternalRow row;

    CountReader(RangePartition range, Leader leader, boolean failOnDataLoss) {
      this.range = range;
      this.leader = leader;
      this.failOnDataLoss = failOnDataLoss;
    }

    @Override
    public boolean next() {
      if (row != null) {
        return false;
      }
      if (range.until <= range.from) {
        row = new GenericInternalRow(new Object[] {0L});  // nothing to read: a zero, so the sum is not NULL
        return true;
      }
      while (true) {
        Object[] answer;
        try {
          PyActorHandle actor = leader.get();
          if (actor == null) {
            leader.failed("the partition has no leader", 0);
            continue;
          }
          answer = (Object[]) actor.task(PyActorMethod.of("fetch_bytes", Object.class), range.from, 1, 0).remote()
              .get(60_000L);
        } catch (RaylogSparkException e) {
          throw e;
        } catch (RuntimeException e) {
          leader.failed(String.valueOf(e.getMessage()), 0);
          continue;
        }
        RayCalls.ReplicaError error = RayCalls.error(answer[4]);
        long start = range.from;
        if (error != null) {
          if (!error.type.equals("OffsetOutOfRangeError")) {
            if (!error.retriable) {
              throw error.raise();
            }
            leader.failed(error.message, 0);
            continue;
          }
          if (failOnDataLoss || range.from >= error.logStart) {
            throw leader.gone(range.from, error);
          }
          LOG.warn("{}-{}: records {}..{} are gone; counting from {} (failOnDataLoss=false)", range.topic,
              range.partition, range.from, error.logStart - 1, error.logStart);
          start = error.logStart;
        }
        row = new GenericInternalRow(new Object[] {Math.max(0, range.until - start)});
        return true;
      }
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() {}
  }
}
