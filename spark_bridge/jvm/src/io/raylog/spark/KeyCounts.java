package io.raylog.spark;

import java.util.Arrays;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;

/**
 * Records counted per key, for GROUP BY key pushed into a task: a key is hashed and compared
 * where the decoder left it (an address into the batch's payload), so a record costs neither a
 * {@code byte[]} nor a row; a key's bytes are copied once, when first seen. Open addressing with
 * linear probing over a power-of-two table kept at most half full.
 *
 * <p>{@link #full()} bounds what a task holds (distinct keys and their bytes): the reader then
 * hands the counts to Spark and starts afresh. Spark's final aggregation sums the counts of every
 * row of a key, so a key may come out of one task more than once.
 */
final class KeyCounts {
  /** Distinct keys held before the counts are handed out: 64 Ki keys keep the table in a core's
   *  cache, and a task whose keys rarely repeat hands out about as many rows as an unpushed
   *  read would, never more. */
  static final int MAX_KEYS = 1 << 16;
  /** Bytes of distinct keys held before the counts are handed out (keys of any size). */
  static final long MAX_KEY_BYTES = 32L * 1024 * 1024;
  private static final int SEED = 42;

  private int[] slots = new int[1024];  // an entry's index + 1; 0 is an empty slot
  private byte[][] keys = new byte[512][];
  private int[] hashes = new int[512];
  private long[] counts = new long[512];
  private int size;
  private long keyBytes;
  private long nulls;

  /** One record of the key at {@code address} (off-heap, {@code base} null) or in {@code base}. */
  void add(Object base, long address, int length) {
    int hash = Murmur3_x86_32.hashUnsafeBytes2(base, address, length, SEED);
    int mask = slots.length - 1;
    for (int slot = hash & mask; ; slot = (slot + 1) & mask) {
      int entry = slots[slot] - 1;
      if (entry < 0) {
        insert(slot, hash, base, address, length);
        return;
      }
      byte[] key = keys[entry];
      if (hashes[entry] == hash && key.length == length
          && ByteArrayMethods.arrayEquals(key, Platform.BYTE_ARRAY_OFFSET, base, address, length)) {
        counts[entry]++;
        return;
      }
    }
  }

  /** {@code n} records with a null key. */
  void addNulls(long n) {
    nulls += n;
  }

  /** Whether as much is held as a task should: time to {@link #drain()}. */
  boolean full() {
    return size >= MAX_KEYS || keyBytes >= MAX_KEY_BYTES;
  }

  boolean isEmpty() {
    return size == 0 && nulls == 0;
  }

  /** Everything counted (a null key last, if any record had one), and a fresh start. */
  Drained drain() {
    int n = size + (nulls > 0 ? 1 : 0);
    Drained out = new Drained(Arrays.copyOf(keys, n), Arrays.copyOf(counts, n), n);
    if (nulls > 0) {
      out.keys[size] = null;
      out.counts[size] = nulls;
    }
    Arrays.fill(slots, 0);
    Arrays.fill(keys, 0, size, null);
    size = 0;
    keyBytes = 0;
    nulls = 0;
    return out;
  }

  private void insert(int slot, int hash, Object base, long address, int length) {
    byte[] key = new byte[length];
    Platform.copyMemory(base, address, key, Platform.BYTE_ARRAY_OFFSET, length);
    if (size == keys.length) {
      keys = Arrays.copyOf(keys, size * 2);
      hashes = Arrays.copyOf(hashes, size * 2);
      counts = Arrays.copyOf(counts, size * 2);
    }
    keys[size] = key;
    hashes[size] = hash;
    counts[size] = 1;
    slots[slot] = ++size;
    keyBytes += length;
    if (2 * size > slots.length) {
      rehash(slots.length * 2);
    }
  }

  private void rehash(int capacity) {
    slots = new int[capacity];
    int mask = capacity - 1;
    for (int entry = 0; entry < size; entry++) {
      int slot = hashes[entry] & mask;
      while (slots[slot] != 0) {
        slot = (slot + 1) & mask;
      }
      slots[slot] = entry + 1;
    }
  }

  /** Counts handed out: {@code keys[i]} (null for the null key) was seen {@code counts[i]} times. */
  static final class Drained {
    final byte[][] keys;
    final long[] counts;
    final int size;

    Drained(byte[][] keys, long[] counts, int size) {
      this.keys = keys;
      this.counts = counts;
      this.size = size;
    }
  }
}
