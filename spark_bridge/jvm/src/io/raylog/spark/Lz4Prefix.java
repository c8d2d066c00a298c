package io.raylog.spark;

import org.apache.spark.unsafe.Platform;

/**
 * lz4's block format decoded only as far as a reader needs. A payload keeps its key column
 * before its values (payload.py), so a query that reads keys alone (a group-by key) needs the
 * first tenth of a payload: this decoder stops once the bytes asked for are out, where lz4-java
 * inflates a block whole or not at all.
 *
 * <p>The bytes it decodes have passed the batch CRC and were validated whole by the replica that
 * appended them, so the tail it skips is known good; every bound is still checked here (the
 * output is written by address), and a block that runs past its input or its declared size, or
 * whose match reaches before the output, is refused with {@link IllegalArgumentException}.
 */
public final class Lz4Prefix {
  private static final int MIN_MATCH = 4;
  /** Below this, a byte loop beats Platform.copyMemory's per-call cost (keys are a few bytes). */
  private static final int SHORT_COPY = 32;

  private final byte[] src;
  private final int srcEnd;
  private final Object destBase;
  private final long destAt;
  private final int capacity;
  private int sp;
  private int dp;

  /** Decodes the block in {@code src[off, off + len)} into {@code capacity} bytes at
   *  ({@code destBase}, {@code destAt}), Platform's addressing: a null base and an address, or
   *  an array and its offset. */
  Lz4Prefix(byte[] src, int off, int len, Object destBase, long destAt, int capacity) {
    if (off < 0 || len < 0 || off + len > src.length || capacity < 0) {
      throw new IllegalArgumentException("lz4 block bounds out of range");
    }
    this.src = src;
    this.sp = off;
    this.srcEnd = off + len;
    this.destBase = destBase;
    this.destAt = destAt;
    this.capacity = capacity;
  }

  /** Decode until at least {@code need} bytes are out (the whole block when need is the capacity). */
  void ensure(long need) {
    if (need > capacity) {
      throw new IllegalArgumentException("lz4 block: " + need + " bytes asked of " + capacity + " declared");
    }
    while (dp < need) {
      if (sp >= srcEnd) {
        throw new IllegalArgumentException("lz4 block ends after " + dp + " bytes, before " + need);
      }
      int token = src[sp++] & 0xFF;
      int literals = token >>> 4;
      if (literals == 15) {
        literals += extraLength();
      }
      if (literals > srcEnd - sp || literals > capacity - dp) {
        throw new IllegalArgumentException("lz4 literals run past the "
            + (literals > srcEnd - sp ? "input" : capacity + " bytes declared"));
      }
      copyIn(literals);
      if (sp == srcEnd) {
        continue; // the last sequence is literals alone
      }
      if (srcEnd - sp < 2) {
        throw new IllegalArgumentException("lz4 match offset cut short");
      }
      int offset = (src[sp] & 0xFF) | (src[sp + 1] & 0xFF) << 8;
      sp += 2;
      if (offset == 0 || offset > dp) {
        throw new IllegalArgumentException("lz4 match offset " + offset + " reaches before the output");
      }
      int match = token & 0x0F;
      if (match == 15) {
        match += extraLength();
      }
      match += MIN_MATCH;
      if (match > capacity - dp) {
        throw new IllegalArgumentException("lz4 match runs past the " + capacity + " bytes declared");
      }
      copyMatch(offset, match);
    }
  }

  /** Bytes out so far. */
  int decoded() {
    return dp;
  }

  /** Whether the whole block is read, which a full decode must end with. */
  boolean finished() {
    return sp == srcEnd;
  }

  /** The length bytes after a saturated token nibble: 255 means another byte follows. */
  private int extraLength() {
    int total = 0;
    int b;
    do {
      if (sp >= srcEnd) {
        throw new IllegalArgumentException("lz4 length cut short");
      }
      b = src[sp++] & 0xFF;
      total += b;
      if (total > capacity) { // also keeps the sum from overflowing
        throw new IllegalArgumentException("lz4 length over the " + capacity + " bytes declared");
      }
    } while (b == 255);
    return total;
  }

  private void copyIn(int n) {
    if (n < SHORT_COPY) {
      for (int i = 0; i < n; i++) {
        Platform.putByte(destBase, destAt + dp + i, src[sp + i]);
      }
    } else {
      Platform.copyMemory(src, Platform.BYTE_ARRAY_OFFSET + sp, destBase, destAt + dp, n);
    }
    sp += n;
    dp += n;
  }

  /** A match may overlap its own output (offset < length repeats the last offset bytes); each
   *  copy here reads only bytes already out, a whole number of periods back, so no copy overlaps
   *  its source and the period doubles as it goes. */
  private void copyMatch(int offset, int length) {
    if (length < SHORT_COPY) {
      for (int i = 0; i < length; i++) {
        Platform.putByte(destBase, destAt + dp + i, Platform.getByte(destBase, destAt + dp + i - offset));
      }
      dp += length;
      return;
    }
    int done = 0;
    while (done < length) {
      int back = offset * ((done + offset) / offset);
      int n = Math.min(length - done, back);
      Platform.copyMemory(destBase, destAt + dp + done - back, destBase, destAt + dp + done, n);
      done += n;
    }
    dp += length;
  }

  /** The first bytes of the lz4 block {@code src} declared to inflate to {@code size}, decoded
   *  until at least {@code need} are out (tests check the decoder against the lz4 package with it). */
  public static byte[] decodePrefix(byte[] src, int size, int need) {
    byte[] dest = new byte[size];
    Lz4Prefix d = new Lz4Prefix(src, 0, src.length, dest, Platform.BYTE_ARRAY_OFFSET, size);
    d.ensure(need);
    return java.util.Arrays.copyOf(dest, d.decoded());
  }
}
