package io.raylog.spark;

import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.function.PyActorMethod;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

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
  private final Map<String, Integer> partitionCounts = new HashMap<>();
  private final Map<String, Long> batchLimits = new HashMap<>();
  private final Map<String, Long> maxMessageBytes = new HashMap<>();
  private final Map<String, Integer> sticky = new HashMap<>();
  private final Map<String, BatchEncoder> open = new HashMap<>();
  private final Map<String, PyActorHandle> leaders = new HashMap<>();
  private final Map<String, Integer> sequences = new HashMap<>();
  /** Per partition, the producer epoch its batches carry (bumped when its sequences start over). */
  private final Map<String, Short> epochs = new HashMap<>();
  private final ArrayDeque<InFlight> inFlight = new ArrayDeque<>();
  private final long producerId = new java.security.SecureRandom().nextLong() >>> 2;
  private long written;
  /** What the open batches hold together (their size() bounds), kept under buffer_memory. */
  private long openBytes;

  RecordSender(SinkSpec spec) {
    this.spec = spec;
  }

  private static final class InFlight {
    final String topic;
    final int partition;
    final byte[] batch;
    final int records;
    final long deadline;
    /** The producer epoch in the batch's header now. */
    short epoch;
    ObjectRef<Object> answer;

    InFlight(String topic, int partition, byte[] batch, int records, long deadline, short epoch) {
      this.topic = topic;
      this.partition = partition;
      this.batch = batch;
      this.records = records;
      this.deadline = deadline;
      this.epoch = epoch;
    }
  }

  @Override
  public void write(InternalRow row) {
    String topic = spec.topic;
    if (topic == null) {
      if (row.isNullAt(spec.topicColumn)) {
        throw SinkSpec.invalid("a row to write has a null topic and no topic option was given");
      }
      topic = row.getUTF8String(spec.topicColumn).toString();
    }
    byte[] key = spec.key < 0 || row.isNullAt(spec.key) ? null
        : spec.stringKey ? row.getUTF8String(spec.key).getBytes() : row.getBinary(spec.key);
    byte[] value = row.isNullAt(spec.value) ? null
        : spec.stringValue ? row.getUTF8String(spec.value).getBytes() : row.getBinary(spec.value);
    int count = partitions(topic);
    int partition;
    boolean stuck = false;
    if (spec.partition >= 0 && !row.isNullAt(spec.partition)) {
      partition = row.getInt(spec.partition);
      if (partition < 0 || partition >= count) {
        throw new RaylogSparkException("InvalidPartitionError", "topic '" + topic + "' has partitions 0.."
            + (count - 1) + ", not " + partition);
      }
    } else if (key != null) {
      partition = (Murmur2.hash(key) & 0x7fffffff) % count;
    } else {
      partition = sticky.computeIfAbsent(topic, t -> ThreadLocalRandom.current().nextInt(count));
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
    long recordSize = BatchEncoder.recordSize(key, value, headers);
    long alone = BatchEncoder.EMPTY_SIZE + recordSize;
    if (alone + (spec.lz4 ? BatchEncoder.lz4Growth(alone) : 0) > maxMessageBytes.get(topic)) {
      // As Kafka's producer: refused here, before it is sent; what the task sent before stays written.
      throw new RaylogSparkException("RecordTooLargeError", "a record of " + recordSize + " bytes (key, value and "
          + "headers) does not fit a batch of topic '" + topic + "', whose max_message_bytes is "
          + maxMessageBytes.get(topic));
    }
    if (openBytes + recordSize > spec.bufferMemory) {
      makeRoom(recordSize);
    }
    String tp = topic + "\u0000" + partition;
    BatchEncoder batch = open.get(tp);
    if (batch != null && batch.size() + recordSize > batchLimits.get(topic)) {
      // Sent without this record: with it, the topic would refuse the batch after the task's
      // earlier batches landed. A record with no key or partition starts the next sticky batch.
      open.remove(tp);
      send(topic, partition, batch);
      if (stuck) {
        sticky.remove(topic);
        partition = sticky.computeIfAbsent(topic, t -> ThreadLocalRandom.current().nextInt(count));
        tp = topic + "\u0000" + partition;
      }
      batch = open.get(tp);
      if (batch != null && batch.size() + recordSize > batchLimits.get(topic)) {
        open.remove(tp);
        send(topic, partition, batch);
        batch = null;
      }
    }
    if (batch == null) {
      batch = new BatchEncoder();
      open.put(tp, batch);
      openBytes += batch.size();
    }
    long before = batch.size();
    batch.add(key, value, timestamp, headers);
    openBytes += batch.size() - before;
    if (batch.size() >= batchLimits.get(topic)) {
      open.remove(tp);
      send(topic, partition, batch);
      sticky.remove(topic);
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

  private int partitions(String topic) {
    Integer n = partitionCounts.get(topic);
    if (n == null) {
      com.fasterxml.jackson.databind.JsonNode about = RayCalls.planner(spec.namespace, "partition_count", topic);
      n = about.get("partitions").asInt();
      partitionCounts.put(topic, n);
      // The topic refuses batches over max_message_bytes; size() bounds a batch uncompressed, and
      // lz4 adds at most lz4Growth to what does not compress.
      long max = about.get("max_message_bytes").asLong();
      maxMessageBytes.put(topic, max);
      long room = spec.lz4 ? max - BatchEncoder.lz4Growth(max) : max;
      batchLimits.put(topic, Math.max(1, Math.min(spec.batchSize, room)));
    }
    return n;
  }

  /** Sends the largest open batches until {@code needed} more bytes fit buffer_memory (Kafka's
   *  producer blocks for room instead; a task sending its fullest batch early is the same bound). */
  private void makeRoom(long needed) {
    while (openBytes + needed > spec.bufferMemory && !open.isEmpty()) {
      Map.Entry<String, BatchEncoder> largest = null;
      for (Map.Entry<String, BatchEncoder> e : open.entrySet()) {
        if (largest == null || e.getValue().size() > largest.getValue().size()) {
          largest = e;
        }
      }
      String[] tp = largest.getKey().split("\u0000");
      open.remove(largest.getKey());
      send(tp[0], Integer.parseInt(tp[1]), largest.getValue());
    }
  }

  private void send(String topic, int partition, BatchEncoder batch) {
    openBytes -= batch.size();
    String tp = topic + "\u0000" + partition;
    int sequence = sequences.getOrDefault(tp, 0);
    sequences.put(tp, sequence + batch.count());
    short epoch = epochs.getOrDefault(tp, (short) 0);
    byte[] bytes = batch.encode(spec.lz4, producerId, sequence);
    if (epoch != 0) {
      BatchEncoder.restamp(bytes, epoch, sequence);
    }
    InFlight f = new InFlight(topic, partition, bytes, batch.count(), System.currentTimeMillis() + spec.timeoutMs,
        epoch);
    while (inFlight.size() >= MAX_IN_FLIGHT) {
      complete(inFlight.poll());
    }
    dispatch(f);
    inFlight.add(f);
  }

  private void dispatch(InFlight f) {
    String tp = f.topic + "\u0000" + f.partition;
    PyActorHandle leader = leaders.get(tp);
    if (leader == null) {
      String name = RayCalls.planner(spec.namespace, "leader", f.topic, f.partition).get("name").asText();
      leader = name.isEmpty() ? null : RayCalls.actor(name, spec.namespace);
      if (leader != null) {
        leaders.put(tp, leader);
      }
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
          String tp = f.topic + "\u0000" + f.partition;
          boolean restamped = f.epoch != epochs.getOrDefault(tp, (short) 0);
          if (error.type.equals("OutOfOrderSequenceError") && !restamped) {
            // The batches before it are acknowledged (answers are awaited in order), so the gap is
            // for good: a leader elected without the last batches acks=1 acknowledged. As raylog's
            // producer (and Kafka's, KIP-360): a new epoch, its sequences from 0.
            startOver(tp, f);
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
      PyActorHandle dead = leaders.remove(f.topic + "\u0000" + f.partition);
      if (dead != null) {
        RayCalls.forgetHandle(dead);  // a replica Ray restarts under the same name needs a new handle
      }
      if (System.currentTimeMillis() > f.deadline) {
        throw new RaylogSparkException("KafkaTimeoutError", f.topic + "-" + f.partition + ": a batch of " + f.records
            + " records was not acknowledged within delivery_timeout_ms " + spec.timeoutMs + " (" + why + ")");
      }
      try {
        Thread.sleep(BACKOFF_MS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RaylogSparkException("KafkaTimeoutError", "interrupted while sending to " + f.topic);
      }
      dispatch(f);
    }
  }

  /** Bumps {@code tp}'s producer epoch and restamps {@code first} and every batch of {@code tp}
   *  still in flight after it with sequences from 0, in order; later batches follow on. */
  private void startOver(String tp, InFlight first) {
    short epoch = (short) (epochs.getOrDefault(tp, (short) 0) + 1);
    epochs.put(tp, epoch);
    int sequence = 0;
    List<InFlight> batches = new ArrayList<>();
    batches.add(first);
    for (InFlight g : inFlight) {
      if ((g.topic + "\u0000" + g.partition).equals(tp)) {
        batches.add(g);
      }
    }
    for (InFlight g : batches) {
      BatchEncoder.restamp(g.batch, epoch, sequence);
      g.epoch = epoch;
      sequence += g.records;
    }
    sequences.put(tp, sequence);
  }

  /** Sends what is gathered and waits for every answer; the number of records written. */
  long flush() {
    for (Map.Entry<String, BatchEncoder> e : open.entrySet()) {
      String[] tp = e.getKey().split("\u0000");
      send(tp[0], Integer.parseInt(tp[1]), e.getValue());
    }
    open.clear();
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
    open.clear();
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
