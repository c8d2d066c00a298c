package io.raylog.spark;

/** Kafka's murmur2 (seed 0x9747b28c), so a keyed record lands where raylog's Python producer and
 *  Kafka's default partitioner put it: (murmur2(key) & 0x7fffffff) % partitions. */
final class Murmur2 {
  private Murmur2() {}

  static int hash(byte[] data) {
    final int m = 0x5bd1e995;
    final int r = 24;
    int length = data.length;
    int h = 0x9747b28c ^ length;
    int words = length / 4;
    for (int i = 0; i < words; i++) {
      int at = i * 4;
      int k = (data[at] & 0xff) + ((data[at + 1] & 0xff) << 8) + ((data[at + 2] & 0xff) << 16)
          + ((data[at + 3] & 0xff) << 24);
      k *= m;
      k ^= k >>> r;
      k *= m;
      h *= m;
      h ^= k;
    }
    int tail = length & ~3;
    switch (length % 4) {
      case 3:
        h ^= (data[tail + 2] & 0xff) << 16;
        // fall through
      case 2:
        h ^= (data[tail + 1] & 0xff) << 8;
        // fall through
      case 1:
        h ^= data[tail] & 0xff;
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
