package io.raylog.spark;

import org.apache.spark.unsafe.Platform;

/** Kafka's murmur2 (seed 0x9747b28c), so a keyed record lands where raylog's Python producer and
 *  Kafka's default partitioner put it: (murmur2(key) & 0x7fffffff) % partitions. */
final class Murmur2 {
  private Murmur2() {}

  static int hash(byte[] data) {
    return hash(data, Platform.BYTE_ARRAY_OFFSET, data.length);
  }

  /** The hash of {@code length} bytes at {@code base}/{@code offset} (as {@link Platform} reads them). */
  static int hash(Object base, long offset, int length) {
    final int m = 0x5bd1e995;
    final int r = 24;
    int h = 0x9747b28c ^ length;
    int words = length / 4;
    for (int i = 0; i < words; i++) {
      long at = offset + i * 4L;
      int k = (Platform.getByte(base, at) & 0xff) + ((Platform.getByte(base, at + 1) & 0xff) << 8)
          + ((Platform.getByte(base, at + 2) & 0xff) << 16) + ((Platform.getByte(base, at + 3) & 0xff) << 24);
      k *= m;
      k ^= k >>> r;
      k *= m;
      h *= m;
      h ^= k;
    }
    long tail = offset + (length & ~3);
    switch (length % 4) {
      case 3:
        h ^= (Platform.getByte(base, tail + 2) & 0xff) << 16;
        // fall through
      case 2:
        h ^= (Platform.getByte(base, tail + 1) & 0xff) << 8;
        // fall through
      case 1:
        h ^= Platform.getByte(base, tail) & 0xff;
        h *= m;
        break;
      default:
        break;
    }
    h ^= h >>> 13;
    h *= m;
    h ^= h >>> 15;
    return h;
  }
}
