package io.raylog.spark;

import java.io.File;
import java.lang.invoke.VarHandle;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * The Java twin of raylog/storage/local_reader.py: a partition's committed batches read straight
 * from the leader's segment files when the Spark task runs on the leader's Ray node, with the
 * replica's read-view page (raylog/storage/read_view.py, layout in docs/architecture.md) saying
 * how far. It answers what the leader's fetch answers, or null: then the task asks the leader.
 * Files are read with positional reads, never mapped (a truncation under a mapping would crash
 * the JVM); every CRC is checked, and a second look at the page throws away bytes read while
 * the replica changed its files. The page is trusted only within the replica's lease (its
 * valid_until_ns, on the CLOCK_MONOTONIC that System.nanoTime reads on Linux) and while its writer
 * is the same process (pid and start time), and a segment is left for the next only when its
 * batches end exactly at its end: bytes that stop making sense never let a reader skip records.
 */
final class LocalSegments implements AutoCloseable {
  private static final int PAGE_SIZE = 4096;
  private static final int SEQUENCE_AT = 8;
  private static final int FIELDS_AT = 16;
  private static final int ROLE_LEADER = 1;
  private static final int VERSION = 2;
  private static final int HEADER_SIZE = 61;
  private static final int LOG_OVERHEAD = 12;
  private static final int CRC_AT = 17;
  private static final int ATTRIBUTES_AT = 21;
  private static final int LAST_DELTA_AT = 23;
  private static final int PEEK = LAST_DELTA_AT + 4;

  /** One consistent reading of the page. */
  static final class Snapshot {
    long highWatermark, logStart, logEnd, activeBase, activeSize, activeIndexEntries, generation, pid, updatedNs,
        validUntilNs, startTicks;
    int leaderEpoch, role;
  }

  private final Path directory;
  private final FileChannel pageChannel;
  private final MappedByteBuffer page;
  private final Map<Long, FileChannel> logs = new HashMap<>();
  private List<Long> bases = new ArrayList<>();
  private long listedGeneration = -1, listedActive = -1;
  private long hintBase = -1, hintOffset = -1, hintPosition = -1;
  /** The high watermark and log end of the last answer. */
  long highWatermark = -1;
  long logEnd = -1;

  LocalSegments(String directory) throws IOException {
    this.directory = Path.of(directory);
    pageChannel = FileChannel.open(this.directory.resolve("read-view"), StandardOpenOption.READ);
    if (pageChannel.size() < PAGE_SIZE) {
      pageChannel.close();
      throw new IOException(directory + "/read-view is not a read view yet");
    }
    page = pageChannel.map(FileChannel.MapMode.READ_ONLY, 0, PAGE_SIZE);
    page.order(ByteOrder.LITTLE_ENDIAN);
    if (page.get(0) != 'R' || page.get(1) != 'L' || page.get(2) != 'R' || page.get(3) != 'V'
        || page.getInt(4) != VERSION) {
      pageChannel.close();
      throw new IOException(directory + "/read-view is not a version " + VERSION + " read view");
    }
  }

  Snapshot snapshot() {
    for (int attempt = 0; attempt < 1000; attempt++) {
      long before = page.getLong(SEQUENCE_AT);
      if ((before & 1) != 0) {
        continue;
      }
      // The seqlock's order: the sequence before the fields, the fields before the sequence again
      // (a machine that reorders loads, as aarch64, would otherwise mix two publications).
      VarHandle.acquireFence();
      Snapshot s = new Snapshot();
      s.highWatermark = page.getLong(FIELDS_AT);
      s.logStart = page.getLong(FIELDS_AT + 8);
      s.logEnd = page.getLong(FIELDS_AT + 16);
      s.leaderEpoch = page.getInt(FIELDS_AT + 24);
      s.role = page.getInt(FIELDS_AT + 28);
      s.activeBase = page.getLong(FIELDS_AT + 32);
      s.activeSize = page.getLong(FIELDS_AT + 40);
      s.activeIndexEntries = page.getLong(FIELDS_AT + 48);
      s.generation = page.getLong(FIELDS_AT + 56);
      s.pid = page.getLong(FIELDS_AT + 64);
      s.updatedNs = page.getLong(FIELDS_AT + 72);
      s.validUntilNs = page.getLong(FIELDS_AT + 80);
      s.startTicks = page.getLong(FIELDS_AT + 88);
      VarHandle.acquireFence();
      if (page.getLong(SEQUENCE_AT) == before) {
        return s;
      }
    }
    return null;
  }

  /** The leader's batches from {@code offset} (empty at the high watermark), or null: fetch instead. */
  byte[] read(long offset, int maxBytes, int leaderEpoch) {
    Snapshot s1 = snapshot();
    if (s1 == null || s1.role != ROLE_LEADER || (s1.generation & 1) != 0 || s1.leaderEpoch != leaderEpoch
        || !alive(s1) || offset < s1.logStart || offset > s1.logEnd) {
      return null;
    }
    highWatermark = s1.highWatermark;
    logEnd = s1.logEnd;
    if (offset >= s1.highWatermark) {
      return new byte[0];
    }
    byte[] data;
    try {
      data = readSegments(s1, offset, maxBytes);
    } catch (IOException e) {
      data = null;
    }
    Snapshot s2 = snapshot();
    if (data == null || s2 == null || s2.generation != s1.generation || s2.logStart > offset) {
      forget();
      return null;
    }
    return data;
  }

  private static boolean alive(Snapshot s) {
    return System.nanoTime() < s.validUntilNs && startTicks(s.pid) == s.startTicks;
  }

  /** A process's start time in clock ticks since boot (/proc/pid/stat field 22), -1 if it is gone. */
  static long startTicks(long pid) {
    try {
      String stat = new String(java.nio.file.Files.readAllBytes(Path.of("/proc", Long.toString(pid), "stat")),
          java.nio.charset.StandardCharsets.US_ASCII);
      String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      return Long.parseLong(fields[19]);
    } catch (IOException | RuntimeException e) {
      return -1;
    }
  }

  private List<Long> segments(Snapshot s) throws IOException {
    if (s.generation != listedGeneration || s.activeBase != listedActive) {
      boolean newGeneration = s.generation != listedGeneration;
      List<Long> found = new ArrayList<>();
      File[] names = directory.toFile().listFiles();
      if (names == null) {
        throw new IOException(directory + " cannot be listed");
      }
      for (File f : names) {
        String name = f.getName();
        if (name.length() == 24 && name.endsWith(".log") && name.substring(0, 20).chars().allMatch(Character::isDigit)) {
          long base = Long.parseLong(name.substring(0, 20));
          if (base <= s.activeBase) {
            found.add(base);
          }
        }
      }
      Collections.sort(found);
      for (Long base : new ArrayList<>(logs.keySet())) {
        if (newGeneration || !found.contains(base)) {
          logs.remove(base).close();
        }
      }
      bases = found;
      listedGeneration = s.generation;
      listedActive = s.activeBase;
      hintBase = -1;
    }
    return bases;
  }

  private FileChannel log(long base) throws IOException {
    FileChannel ch = logs.get(base);
    if (ch == null) {
      ch = FileChannel.open(directory.resolve(String.format("%020d.log", base)), StandardOpenOption.READ);
      logs.put(base, ch);
    }
    return ch;
  }

  private byte[] readSegments(Snapshot s, long offset, int maxBytes) throws IOException {
    List<Long> all = segments(s);
    int slot = 0;
    for (int i = 0; i < all.size(); i++) {
      if (all.get(i) <= offset) {
        slot = i;
      }
    }
    for (int i = slot; i < all.size(); i++) {
      long base = all.get(i);
      boolean active = base == s.activeBase;
      long limit = active ? s.activeSize : log(base).size();
      Object[] found = readSegment(s, base, offset, maxBytes, limit, active);
      if (found == null) {
        return null;
      }
      byte[] data = (byte[]) found[0];
      if (data.length > 0 || (Boolean) found[1]) {
        return data;
      }
    }
    return new byte[0];
  }

  /**
   * {batches, whether the read stops in this segment (the high watermark, maxBytes or the active
   * segment's written end)}, or null when the bytes do not hold together: a header that is not
   * one ends the read there, it never lets the caller step to the next segment.
   */
  private Object[] readSegment(Snapshot s, long base, long offset, int maxBytes, long limit, boolean active)
      throws IOException {
    FileChannel ch = log(base);
    long pos = startPosition(s, base, offset);
    long start = -1;
    long end = pos;
    ByteBuffer head = ByteBuffer.allocate(PEEK);
    boolean stopped = active;
    while (end < limit) {
      head.clear();
      if (readFully(ch, head, end) < PEEK) {
        return null;
      }
      long batchBase = head.getLong(0);
      int length = head.getInt(8);
      long size = LOG_OVERHEAD + (long) length;
      if (size < HEADER_SIZE || end + size > limit) {
        return null;
      }
      long last = batchBase + head.getInt(LAST_DELTA_AT);
      if (last >= s.highWatermark) {
        stopped = true;
        break;
      }
      if (start < 0) {
        if (last >= offset) {
          start = end;
        }
      } else if (end + size - start > maxBytes) {
        stopped = true;
        break;
      }
      end += size;
    }
    if (start < 0 || end == start) {
      return new Object[] {new byte[0], stopped};
    }
    ByteBuffer data = ByteBuffer.allocate((int) (end - start));
    if (readFully(ch, data, start) != end - start || !crcsHold(data.array())) {
      return null;
    }
    byte[] bytes = data.array();
    hintBase = base;
    hintOffset = lastOffset(bytes) + 1;
    hintPosition = end;
    return new Object[] {bytes, stopped};
  }

  private long startPosition(Snapshot s, long base, long offset) throws IOException {
    if (hintBase == base && hintOffset <= offset) {
      return hintPosition;
    }
    Path index = directory.resolve(String.format("%020d.index", base));
    long entries;
    try (FileChannel ch = FileChannel.open(index, StandardOpenOption.READ)) {
      entries = base == s.activeBase ? s.activeIndexEntries : ch.size() / 8;
      long lo = 0, hi = entries - 1, found = 0;
      ByteBuffer e = ByteBuffer.allocate(8);
      long target = offset - base;
      while (lo <= hi) {
        long mid = (lo + hi) >>> 1;
        e.clear();
        if (readFully(ch, e, mid * 8) < 8) {
          return 0;
        }
        long rel = e.getInt(0) & 0xffffffffL;
        if (rel <= target) {
          found = e.getInt(4) & 0xffffffffL;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      return found;
    } catch (java.nio.file.NoSuchFileException e) {
      return 0;
    }
  }

  private static int readFully(FileChannel ch, ByteBuffer buf, long at) throws IOException {
    int total = 0;
    while (buf.hasRemaining()) {
      int n = ch.read(buf, at + total);
      if (n <= 0) {
        break;
      }
      total += n;
    }
    return total;
  }

  private static boolean crcsHold(byte[] data) {
    ByteBuffer b = ByteBuffer.wrap(data);
    int pos = 0;
    while (pos < data.length) {
      long size = LOG_OVERHEAD + (long) b.getInt(pos + 8);
      if (size < HEADER_SIZE || pos + size > data.length) {
        return false;
      }
      CRC32C crc = new CRC32C();
      crc.update(data, pos + ATTRIBUTES_AT, (int) size - ATTRIBUTES_AT);
      if (crc.getValue() != (b.getInt(pos + CRC_AT) & 0xffffffffL)) {
        return false;
      }
      pos += (int) size;
    }
    return true;
  }

  private static long lastOffset(byte[] data) {
    ByteBuffer b = ByteBuffer.wrap(data);
    int pos = 0;
    long last = -1;
    while (pos < data.length) {
      last = b.getLong(pos) + b.getInt(pos + LAST_DELTA_AT);
      pos += LOG_OVERHEAD + b.getInt(pos + 8);
    }
    return last;
  }

  private void forget() {
    hintBase = -1;
    listedGeneration = -1;
    for (FileChannel ch : logs.values()) {
      try {
        ch.close();
      } catch (IOException ignored) {
        // closing a read-only channel
      }
    }
    logs.clear();
  }

  @Override
  public void close() {
    forget();
    try {
      pageChannel.close();
    } catch (IOException ignored) {
      // closing a read-only channel
    } finally {
      unmap(page);
    }
  }

  /** Unmaps the page now: a MappedByteBuffer is otherwise unmapped only when the GC collects it,
   *  which holds the file (and a deleted partition's disk space) for as long as the JVM likes. */
  private static void unmap(MappedByteBuffer buffer) {
    try {
      Class<?> type = Class.forName("sun.misc.Unsafe");
      java.lang.reflect.Field field = type.getDeclaredField("theUnsafe");
      field.setAccessible(true);
      type.getMethod("invokeCleaner", java.nio.ByteBuffer.class).invoke(field.get(null), buffer);
    } catch (ReflectiveOperationException | RuntimeException e) {
      // no Unsafe here: the GC unmaps it
    }
  }
}
