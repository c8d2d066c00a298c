package io.raylog.spark;

import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.function.PyActorMethod;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.unsafe.Platform;

/**
 * A Spark task's rows into raylog: gathered per partition into record batches of batch_size
 * bytes, each sent to the partition leader's actor (produce_bytes) with up to
 * {@link #MAX_IN_FLIGHT} answers outstanding; the task commits once every batch is
 * acknowledged (acks=all by default). Partitions as Kafka's producer: the partition column,
 * else murmur2 of the key, else one partition per batch (sticky). Each sender is an idempotent
 * producer (a random 62-bit id, as raylog's Python producer, and a sequence per partition): a
 * batch refused with a retriable error (a leader change, too few in-sync replicas) or whose
 * answer was lost is resent, the same bytes, to the new leader until delivery_timeout_ms, and
 * appended once; a sequence gap for good (a leader elected without batches acks=1 acknowledged)
 * starts the partition's sequences over under a new producer epoch. Anything else fails the
 * task; Spark runs it again under a new producer id, so a write is at-least-once across task
 * attempts (and speculative copies), as Spark's Kafka sink.
 */
final class RecordSender implements DataWriter<InternalRow> {
  static final int MAX_IN_FLIGHT = 5;
  static final long BACKOFF_MS = 100;

  private final SinkSpec spec;
  /** Per topic written to, its partitions' state in arrays: looked up when the topic changes from
   *  one row to the next, so a row costs no map lookup nor key string. */
  private final Map<String, Target> targets = new HashMap<>();
  private Target last;
  private final ArrayDeque<InFlight> inFlight = new ArrayDeque<>();
  private final long producerId = new java.security.SecureRandom().nextLong() >>> 2;
  private long written;
  /** What the open batches hold together (their size() bounds), kept under buffer_memory. */
  private long openBytes;
  /** The last batch sent, emptied, for the next one to reuse its buffers (one at most, so what a
   *  task keeps beyond its open batches is one batch's buffers, not one per partition). */
  private BatchEncoder spare;
  private final Field key = new Field();
  private final Field value = new Field();

  RecordSender(SinkSpec spec) {
    this.spec = spec;
  }

  /** A topic's partitions as this task writes them. */
  private static final class Target {
    final String topic;
    final int count;
    final long maxMessageBytes;
    /** A batch is sent before it would pass this (uncompressed) size. */
    final long batchLimit;
    final BatchEncoder[] open;
    final int[] sequences;
    /** Per partition, the producer epoch its batches carry (bumped when its sequences start over). */
    final short[] epochs;
    final PyActorHandle[] leaders;
    /** Leader names from the topic's lookup, each used once, before any failure asks the planner. */
    final String[] leaderNames;
    /** The partition records with no key or partition go to now; -1: pick one. */
    int sticky = -1;

    Target(String topic, int count, long maxMessageBytes, long batchLimit) {
      this.topic = topic;
      this.count = count;
      this.maxMessageBytes = maxMessageBytes;
      this.batchLimit = batchLimit;
      open = new BatchEncoder[count];
      sequences = new int[count];
      epochs = new short[count];
      leaders = new PyActorHandle[count];
      leaderNames = new String[count];
    }

    int stickyPartition() {
      if (sticky < 0) {
        sticky = ThreadLocalRandom.current().nextInt(count);
      }
      return sticky;
    }
  }

  /**
   * A key or value of the row being written, where its bytes are: in the row's own memory when
   * Spark hands an UnsafeRow (copied once, into the batch, with no byte[] per field: the byte[]s
   * were a fifth of the sink's allocations), else in an array of its own.
   */
  private static final class Field {
    Object base;
    long offset;
    /** -1: null. */
    int length;

    void read(InternalRow row, int ordinal, boolean string) {
      if (ordinal < 0 || row.isNullAt(ordinal)) {
        base = null;
        length = -1;
      } else if (row instanceof UnsafeRow) {
        UnsafeRow unsafe = (UnsafeRow) row;
        // A string or binary field's slot holds its offset in the row (high half) and its size.
        long offsetAndSize = unsafe.getLong(ordinal);
        base = unsafe.getBaseObject();
        offset = unsafe.getBaseOffset() + (int) (offsetAndSize >> 32);
        length = (int) offsetAndSize;
      } else {
        byte[] bytes = string ? row.getUTF8String(ordinal).getBytes() : row.getBinary(ordinal);
        base = bytes;
        offset = Platform.BYTE_ARRAY_OFFSET;
        length = bytes.length;
      }
    }
  }

  private static final class InFlight {
    final Target target;
    final int partition;
    final byte[] batch;
    final int records;
    final long deadline;
    /** The producer epoch in the batch's header now. */
    short epoch;
    ObjectRef<Object> answer;

    InFlight(Target target, int partition, byte[] batch, int records, long deadline, short epoch) {
      this.target = target;
      this.partition = partition;
      this.batch = batch;
      this.records = records;
      this.deadline = deadline;
      this.epoch = epoch;
    }
  }

  @Override
  public void write(InternalRow row) {
    Target t;
    if (spec.topic != null) {
      t = last != null ? last : target(spec.topic);
    } else {
      if (row.isNullAt(spec.topicColumn)) {
        throw SinkSpec.invalid("a row to write has a null topic and no topic option was given");
      }
      String topic = row.getUTF8String(spec.topicColumn).toString();
      t = last != null && last.topic.equals(topic) ? last : target(topic);
    }
    last = t;
    key.read(row, spec.key, spec.stringKey);
    value.read(row, spec.value, spec.stringValue);
    int partition;
    boolean stuck = false;
    if (spec.partition >= 0 && !row.isNullAt(spec.partition)) {
      partition = row.getInt(spec.partition);
      if (partition < 0 || partition >= t.count) {
        throw new RaylogSparkException("InvalidPartitionError", "topic '" + t.topic + "' has partitions 0.."
            + (t.count - 1) + ", not " + partition);
      }
    } else if (key.length >= 0) {
      partition = (Murmur2.hash(key.base, key.offset, key.length) & 0x7fffffff) % t.count;
    } else {
      partition = t.stickyPartition();
      stuck = true;
    }
    long timestamp;
    if (spec.timestamp < 0) {
      timestamp = System.currentTimeMillis();
    } else if (row.isNullAt(spec.timestamp)) {
      throw SinkSpec.invalid("the timestamp column has nulls: give every record a timestamp or drop the column");
    } else {
      timestamp = spec.timestampAsInt ? row.getInt(spec.timestamp) : spec.timestampAsLong ? row.getLong(spec.timestamp)
          : Math.floorDiv(row.getLong(spec.timestamp), 1000L);
    }
    List<Object[]> headers = spec.headers < 0 || row.isNullAt(spec.headers) ? null : headers(row);
    long recordSize = BatchEncoder.recordSize(key.length, value.length, headers);
    long alone = BatchEncoder.EMPTY_SIZE + recordSize;
    if (alone + (spec.lz4 ? BatchEncoder.lz4Growth(alone) : 0) > t.maxMessageBytes) {
      // As Kafka's producer: refused here, before it is sent; what the task sent before stays written.
      throw new RaylogSparkException("RecordTooLargeError", "a record of " + recordSize + " bytes (key, value and "
          + "headers) does not fit a batch of topic '" + t.topic + "', whose max_message_bytes is "
          + t.maxMessageBytes);
    }
    if (openBytes + recordSize > spec.bufferMemory) {
      makeRoom(recordSize);
    }
    BatchEncoder batch = t.open[partition];
    if (batch != null && batch.size() + recordSize > t.batchLimit) {
      // Sent without this record: with it, the topic would refuse the batch after the task's
      // earlier batches landed. A record with no key or partition starts the next sticky batch.
      t.open[partition] = null;
      send(t, partition, batch);
      if (stuck) {
        t.sticky = -1;
        partition = t.stickyPartition();
      }
      batch = t.open[partition];
      if (batch != null && batch.size() + recordSize > t.batchLimit) {
        t.open[partition] = null;
        send(t, partition, batch);
        batch = null;
      }
    }
    if (batch == null) {
      batch = spare != null ? spare : new BatchEncoder();
      spare = null;
      t.open[partition] = batch;
      openBytes += batch.size();
    }
    long before = batch.size();
    batch.add(key.base, key.offset, key.length, value.base, value.offset, value.length, timestamp, headers, recordSize);
    openBytes += batch.size() - before;
    if (batch.size() >= t.batchLimit) {
      t.open[partition] = null;
      send(t, partition, batch);
      t.sticky = -1;
    }
  }

  private List<Object[]> headers(InternalRow row) {
    List<Object[]> out = new ArrayList<>();
    if (spec.headersAsMap) {
      MapData m = row.getMap(spec.headers);
      ArrayData keys = m.keyArray();
      ArrayData values = m.valueArray();
      for (int i = 0; i < m.numElements(); i++) {
        out.add(new Object[] {keys.getUTF8String(i).toString(), values.isNullAt(i) ? null : values.getBinary(i)});
      }
      return out;
    }
    ArrayData pairs = row.getArray(spec.headers);
    for (int i = 0; i < pairs.numElements(); i++) {
      if (pairs.isNullAt(i)) {
        continue;
      }
      InternalRow pair = pairs.getStruct(i, 2);
      if (pair.isNullAt(0)) {
        throw SinkSpec.invalid("a header has a null key");
      }
      out.add(new Object[] {pair.getUTF8String(0).toString(), pair.isNullAt(1) ? null : pair.getBinary(1)});
    }
    return out;
  }

  private Target target(String topic) {
    Target t = targets.get(topic);
    if (t == null) {
      com.fasterxml.jackson.databind.JsonNode about = RayCalls.planner(spec.namespace, "partition_count", topic);
      // The topic refuses batches over max_message_bytes; size() bounds a batch uncompressed, and
      // lz4 adds at most lz4Growth to what does not compress.
      long max = about.get("max_message_bytes").asLong();
      long room = spec.lz4 ? max - BatchEncoder.lz4Growth(max) : max;
      t = new Target(topic, about.get("partitions").asInt(), max, Math.max(1, Math.min(spec.batchSize, room)));
      com.fasterxml.jackson.databind.JsonNode leaders = about.path("leaders");
      for (int p = 0; p < t.count && p < leaders.size(); p++) {
        t.leaderNames[p] = leaders.get(p).asText("");
      }
      targets.put(topic, t);
    }
    return t;
  }

  /** Sends the largest open batches until {@code needed} more bytes fit buffer_memory (Kafka's
   *  producer blocks for room instead; a task sending its fullest batch early is the same bound). */
  private void makeRoom(long needed) {
    while (openBytes + needed > spec.bufferMemory) {
      Target fullest = null;
      int at = -1;
      for (Target t : targets.values()) {
        for (int p = 0; p < t.count; p++) {
          if (t.open[p] != null && (fullest == null || t.open[p].size() > fullest.open[at].size())) {
            fullest = t;
            at = p;
          }
        }
      }
      if (fullest == null) {
        return;
      }
      BatchEncoder batch = fullest.open[at];
      fullest.open[at] = null;
      send(fullest, at, batch);
    }
  }

  private void send(Target t, int partition, BatchEncoder batch) {
    openBytes -= batch.size();
    int records = batch.count();
    int sequence = t.sequences[partition];
    t.sequences[partition] = sequence + records;
    short epoch = t.epochs[partition];
    byte[] bytes = batch.encode(spec.lz4, producerId, sequence);
    batch.reset();
    spare = batch;
    if (epoch != 0) {
      BatchEncoder.restamp(bytes, epoch, sequence);
    }
    InFlight f = new InFlight(t, partition, bytes, records, System.currentTimeMillis() + spec.timeoutMs, epoch);
    while (inFlight.size() >= MAX_IN_FLIGHT) {
      complete(inFlight.poll());
    }
    dispatch(f);
    inFlight.add(f);
  }

  private void dispatch(InFlight f) {
    Target t = f.target;
    PyActorHandle leader = t.leaders[f.partition];
    if (leader == null) {
      // The leader the topic's lookup named first, the planner's current answer after a failure.
      String name = t.leaderNames[f.partition];
      t.leaderNames[f.partition] = null;
      if (name == null || name.isEmpty()) {
        name = RayCalls.planner(spec.namespace, "leader", t.topic, f.partition).get("name").asText();
      }
      leader = name.isEmpty() ? null : RayCalls.actor(name, spec.namespace);
      t.leaders[f.partition] = leader;
    }
    f.answer = leader == null ? null
        : leader.task(PyActorMethod.of("produce_bytes", Object.class), f.batch, spec.acks, (int) Math.min(
            spec.timeoutMs, 600_000)).remote();
  }

  /** Waits for a batch's answer, resending it while the error is retriable and time remains. */
  private void complete(InFlight f) {
    while (true) {
      String why;
      try {
        if (f.answer == null) {
          why = "the partition has no leader";
        } else {
          RayCalls.ReplicaError error = new RayCalls.ProduceReply(f.answer.get(spec.timeoutMs + 60_000L)).error;
          if (error == null || error.type.equals("DuplicateSequenceError")) {
            written += f.records;  // a duplicate sequence is a batch the log already has
            return;
          }
          boolean restamped = f.epoch != f.target.epochs[f.partition];
          if (error.type.equals("OutOfOrderSequenceError") && !restamped) {
            // The batches before it are acknowledged (answers are awaited in order), so the gap is
            // for good: a leader elected without the last batches acks=1 acknowledged. As raylog's
            // producer (and Kafka's, KIP-360): a new epoch, its sequences from 0.
            startOver(f);
          } else if (!error.retriable && !(restamped && (error.type.equals("OutOfOrderSequenceError")
              || error.type.equals("InvalidProducerEpochError")))) {
            throw error.raise();
          }
          why = error.message;
        }
      } catch (RaylogSparkException e) {
        throw e;
      } catch (RuntimeException e) {
        why = String.valueOf(e.getMessage());
      }
      PyActorHandle dead = f.target.leaders[f.partition];
      f.target.leaders[f.partition] = null;
      if (dead != null) {
        RayCalls.forgetHandle(dead);  // a replica Ray restarts under the same name needs a new handle
      }
      if (System.currentTimeMillis() > f.deadline) {
        throw new RaylogSparkException("KafkaTimeoutError", f.target.topic + "-" + f.partition + ": a batch of "
            + f.records + " records was not acknowledged within delivery_timeout_ms " + spec.timeoutMs + " (" + why
            + ")");
      }
      try {
        Thread.sleep(BACKOFF_MS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RaylogSparkException("KafkaTimeoutError", "interrupted while sending to " + f.target.topic);
      }
      dispatch(f);
    }
  }

  /** Bumps {@code first}'s partition's producer epoch and restamps {@code first} and every batch
   *  of that partition still in flight after it with sequences from 0, in order; later batches
   *  follow on. */
  private void startOver(InFlight first) {
    Target t = first.target;
    int p = first.partition;
    short epoch = (short) (t.epochs[p] + 1);
    t.epochs[p] = epoch;
    int sequence = 0;
    List<InFlight> batches = new ArrayList<>();
    batches.add(first);
    for (InFlight g : inFlight) {
      if (g.target == t && g.partition == p) {
        batches.add(g);
      }
    }
    for (InFlight g : batches) {
      BatchEncoder.restamp(g.batch, epoch, sequence);
      g.epoch = epoch;
      sequence += g.records;
    }
    t.sequences[p] = sequence;
  }

  /** Sends what is gathered and waits for every answer; the number of records written. */
  long flush() {
    for (Target t : targets.values()) {
      for (int p = 0; p < t.count; p++) {
        BatchEncoder batch = t.open[p];
        if (batch != null) {
          t.open[p] = null;
          send(t, p, batch);
        }
      }
    }
    while (!inFlight.isEmpty()) {
      complete(inFlight.poll());
    }
    return written;
  }

  @Override
  public WriterCommitMessage commit() {
    long n = flush();
    return new Written(n);
  }

  @Override
  public void abort() {
    for (Target t : targets.values()) {
      Arrays.fill(t.open, null);
    }
    openBytes = 0;
    inFlight.clear();
  }

  @Override
  public void close() {}

  /** A task's count of records written. */
  static final class Written implements WriterCommitMessage {
    final long records;

    Written(long records) {
      this.records = records;
    }
  }
}
