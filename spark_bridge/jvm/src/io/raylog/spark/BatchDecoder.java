package io.raylog.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;
import com.github.luben.zstd.Zstd;
import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.ValueType;
import org.xerial.snappy.Snappy;
import org.xerial.snappy.SnappyError;

/**
 * raylog's record batches (raylog/storage/batch.py and payload.py) decoded into Spark
 * ColumnarBatches: the payload is inflated once into an off-heap Arrow buffer, and the key and
 * value columns are read in place from slices of it (the payload already is Arrow's binary
 * layout, so no record is touched before Spark reads it); offset and timestamp are computed from the base
 * values and the delta buffers on access; topic, partition and timestampType are constants.
 * Only the columns the query asks for are made. The batch CRC (CRC32C from attributes on) is
 * checked before anything is read. Codecs and their framing are payload.py's: lz4 (lz4-java),
 * gzip (java.util.zip), snappy (snappy-java) and zstd (zstd-jni), all jars Spark ships; each
 * payload declares its uncompressed size, which is bounded before anything is inflated, and
 * inflates into a buffer of exactly that size.
 */
final class BatchDecoder {
  static final int HEADER_SIZE = 61;
  static final int LENGTH_POS = 8;
  static final int LEADER_EPOCH_POS = 12;
  static final int MAGIC_POS = 16;
  static final int CRC_POS = 17;
  static final int ATTRIBUTES_POS = 21;
  static final int LAST_OFFSET_DELTA_POS = 23;
  static final int BASE_TIMESTAMP_POS = 27;
  static final int MAX_TIMESTAMP_POS = 35;
  static final int RECORD_COUNT_POS = 57;
  static final int CODEC_NONE = 0;
  static final int CODEC_GZIP = 1;
  static final int CODEC_SNAPPY = 2;
  static final int CODEC_LZ4 = 3;
  static final int CODEC_ZSTD = 4;
  static final int TIMESTAMP_TYPE_LOG_APPEND = 0x08;
  static final int LAYOUT_ROWS = 1;
  static final int LAYOUT_ARROW = 2;
  static final long MAX_UNCOMPRESSED_BYTES = 256L * 1024 * 1024;

  static final DataType HEADERS_TYPE = DataTypes.createArrayType(new StructType(new StructField[] {
      DataTypes.createStructField("key", DataTypes.StringType, true),
      DataTypes.createStructField("value", DataTypes.BinaryType, true)}), true);

  private static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();
  /** Columns read from the batch header, the payload's header or its key buffers alone. */
  private static final java.util.Set<String> PREFIX_COLUMNS =
      java.util.Set.of("key", "topic", "partition", "timestampType", "offset", "headers");

  private final String topic;
  private final UTF8String topicUtf8;
  private final int partition;
  private final String[] columns;
  private final boolean withHeaders;
  private final BufferAllocator allocator;
  private final boolean keysOnly;
  private final boolean withTimestamp;
  private long inflatedBytes;

  /** Decodes batches of {@code topic}-{@code partition} into {@code columns} (names of Kafka's schema). */
  BatchDecoder(String topic, int partition, String[] columns, BufferAllocator allocator) {
    this.topic = topic;
    this.topicUtf8 = UTF8String.fromString(topic);
    this.partition = partition;
    this.columns = columns;
    this.withHeaders = java.util.Arrays.asList(columns).contains("headers");
    this.allocator = allocator;
    boolean keys = true;
    for (String c : columns) {
      keys &= PREFIX_COLUMNS.contains(c) || c.equals("timestamp");
    }
    this.keysOnly = keys;
    this.withTimestamp = java.util.Arrays.asList(columns).contains("timestamp");
  }

  /** Whether this batch's columns all come from the payload's header and key buffers, which
   *  lead it: then an lz4 payload is inflated only that far. A timestamp qualifies when the
   *  batch's is the log's append time, one value from the batch header. */
  private boolean keysSuffice(boolean logAppend) {
    return keysOnly && (logAppend || !withTimestamp);
  }

  /** Payload bytes laid out so far, inflated or copied (a read of keys alone stops at them). */
  long inflatedBytes() {
    return inflatedBytes;
  }

  /** One batch's place in a fetch buffer. */
  static final class Header {
    int position;
    int size;
    long baseOffset;
    long nextOffset;
    /** The epoch of the leader that appended it (the batch format's partitionLeaderEpoch). */
    int leaderEpoch;
  }

  /** The whole batches in {@code buf}, in order (a partial trailing batch is left out). */
  static List<Header> headers(byte[] buf) {
    ByteBuffer b = ByteBuffer.wrap(buf).order(ByteOrder.BIG_ENDIAN);
    List<Header> out = new ArrayList<>();
    int pos = 0;
    while (pos + HEADER_SIZE <= buf.length) {
      int length = b.getInt(pos + LENGTH_POS);
      long size = 12L + length;
      if (length < HEADER_SIZE - 12 || pos + size > buf.length) {
        break;
      }
      Header h = new Header();
      h.position = pos;
      h.size = (int) size;
      h.baseOffset = b.getLong(pos);
      h.nextOffset = h.baseOffset + b.getInt(pos + LAST_OFFSET_DELTA_POS) + 1L;
      h.leaderEpoch = b.getInt(pos + LEADER_EPOCH_POS);
      out.add(h);
      pos += (int) size;
    }
    return out;
  }

  /** The batch's records in [from, until) as a ColumnarBatch (null when none is), which owns its
   *  buffers: close it with {@link Decoded#close()}. */
  Decoded decode(byte[] buf, Header h, long from, long until) {
    ByteBuffer b = ByteBuffer.wrap(buf).order(ByteOrder.BIG_ENDIAN);
    int pos = h.position;
    CRC32C crc = new CRC32C();
    crc.update(buf, pos + ATTRIBUTES_POS, h.size - ATTRIBUTES_POS);
    long expected = b.getInt(pos + CRC_POS) & 0xFFFFFFFFL;
    if (crc.getValue() != expected) {
      throw corrupt("fetched batch at offset " + h.baseOffset + " fails its CRC");
    }
    int magic = b.get(pos + MAGIC_POS);
    int attributes = b.getShort(pos + ATTRIBUTES_POS);
    int count = b.getInt(pos + RECORD_COUNT_POS);
    long baseTimestamp = b.getLong(pos + BASE_TIMESTAMP_POS);
    long maxTimestamp = b.getLong(pos + MAX_TIMESTAMP_POS);
    if (count <= 0) {
      throw corrupt("batch at offset " + h.baseOffset + " holds " + count + " records");
    }
    boolean logAppend = (attributes & TIMESTAMP_TYPE_LOG_APPEND) != 0;
    Lz4Prefix prefix = null;
    ArrowBuf raw;
    if (magic == LAYOUT_ARROW && (attributes & 0x07) == CODEC_LZ4 && keysSuffice(logAppend)) {
      raw = lz4Buffer(buf, pos + HEADER_SIZE, h.size - HEADER_SIZE);
      prefix = new Lz4Prefix(buf, pos + HEADER_SIZE + 4, h.size - HEADER_SIZE - 4, null, raw.memoryAddress(),
          (int) raw.writerIndex());
    } else {
      raw = inflate(buf, pos + HEADER_SIZE, h.size - HEADER_SIZE, attributes & 0x07);
    }
    Decoded out = new Decoded();
    out.owned.add(raw::close);
    try {
      Payload p = magic == LAYOUT_ARROW ? arrowLayout(raw, count, prefix)
          : magic == LAYOUT_ROWS ? rowLayout(raw, count, out) : null;
      if (p == null) {
        throw corrupt("batch at offset " + h.baseOffset + " has unknown magic " + magic);
      }
      inflatedBytes += prefix == null ? raw.writerIndex() : prefix.decoded();
      int first = indexOf(p, h.baseOffset, from, count);
      int end = indexOf(p, h.baseOffset, until, count);
      int n = end - first;
      if (n <= 0) {
        out.close();
        return null;
      }
      ColumnVector[] vectors = new ColumnVector[columns.length];
      for (int i = 0; i < columns.length; i++) {
        vectors[i] = column(columns[i], p, h.baseOffset, first, n, baseTimestamp, maxTimestamp, logAppend, out);
      }
      out.batch = new ColumnarBatch(vectors, n);
      out.nextOffset = h.nextOffset;
      return out;
    } catch (RuntimeException e) {
      out.close();
      throw e;
    }
  }

  private ColumnVector column(String name, Payload p, long base, int first, int n, long baseTs,
      long maxTs, boolean logAppend, Decoded out) {
    switch (name) {
      case "key":
        return binary(p.keyNulls, p.keyBufs, p.count, first, n);
      case "value":
        return binary(p.valueNulls, p.valueBufs, p.count, first, n);
      case "topic": {
        ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.StringType);
        c.setUtf8String(topicUtf8);
        return c;
      }
      case "partition": {
        ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.IntegerType);
        c.setInt(partition);
        return c;
      }
      case "timestampType": {
        ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.IntegerType);
        c.setInt(logAppend ? 1 : 0);
        return c;
      }
      case "offset":
        return new ComputedColumns.Offsets(base, first, p.offsetDeltas);
      case "timestamp":
        if (logAppend) {
          ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.TimestampType);
          c.setLong(maxTs * 1000L);
          return c;
        }
        return new ComputedColumns.Timestamps(baseTs, first, p.timestampDeltas);
      case "headers":
        return headers(p.headers, first, n, out);
      default:
        throw new IllegalArgumentException("no column " + name + " in raylog's schema");
    }
  }

  /** The payload's binary column, rows [first, first + n), read in place. */
  private static ColumnVector binary(int nulls, ArrowBuf[] bufs, int count, int first, int n) {
    if (nulls == count) {
      ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.BinaryType);
      c.setNull();
      return c;
    }
    return new ComputedColumns.Binary(nulls == 0 ? null : bufs[0], bufs[1], bufs[2], first, n);
  }

  private ColumnVector headers(List<List<Object[]>> headers, int first, int n, Decoded out) {
    OnHeapColumnVector c = new OnHeapColumnVector(n, HEADERS_TYPE);
    out.owned.add(c::close);
    WritableColumnVector pairs = c.arrayData();
    WritableColumnVector keys = pairs.getChild(0);
    WritableColumnVector values = pairs.getChild(1);
    int at = 0;
    for (int i = 0; i < n; i++) {
      List<Object[]> own = headers == null ? null : headers.get(first + i);
      int size = own == null ? 0 : own.size();
      c.putArray(i, at, size);
      for (int j = 0; j < size; j++) {
        Object[] pair = own.get(j);
        pairs.appendStruct(false);
        byte[] k = ((String) pair[0]).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        keys.appendByteArray(k, 0, k.length);
        if (pair[1] == null) {
          values.appendNull();
        } else {
          byte[] v = (byte[]) pair[1];
          values.appendByteArray(v, 0, v.length);
        }
      }
      at += size;
    }
    return c;
  }

  /** Index of the first record at or after {@code offset} (count when none is). */
  private static int indexOf(Payload p, long base, long offset, int count) {
    if (p.offsetDeltas == null) {
      return (int) Math.max(0, Math.min(count, offset - base));
    }
    int lo = 0;
    int hi = count;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (base + p.offsetDeltas.getInt(4L * mid) < offset) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  private ArrowBuf inflate(byte[] buf, int start, int length, int codec) {
    if (codec == CODEC_NONE) {
      ArrowBuf raw = allocator.buffer(Math.max(length, 1));
      raw.setBytes(0, buf, start, length);
      raw.writerIndex(length);
      return raw;
    }
    if (codec == CODEC_GZIP) {
      return gunzip(buf, start, length);
    }
    if (codec == CODEC_SNAPPY) {
      return unsnappy(buf, start, length);
    }
    if (codec == CODEC_ZSTD) {
      return unzstd(buf, start, length);
    }
    if (codec != CODEC_LZ4) {
      throw new RaylogSparkException("UnsupportedCodecError", topic + "-" + partition + ": unknown codec id " + codec
          + "; raylog supports none (0), gzip (1), snappy (2), lz4 (3), zstd (4)");
    }
    ArrowBuf raw = lz4Buffer(buf, start, length);
    long size = raw.writerIndex();
    try {
      ByteBuffer dest = raw.nioBuffer(0, (int) size);
      int got = LZ4.decompress(ByteBuffer.wrap(buf), start + 4, length - 4, dest, 0, (int) size);
      if (got != size) {
        throw corrupt("lz4 payload inflated to " + got + " bytes, its prefix says " + size);
      }
    } catch (net.jpountz.lz4.LZ4Exception e) {
      raw.close();
      throw corrupt("lz4 payload does not decompress: " + e.getMessage());
    } catch (RuntimeException e) {
      raw.close();
      throw e;
    }
    return raw;
  }

  /** The buffer an lz4 payload (its size as 4 little-endian bytes, then the block) inflates into. */
  private ArrowBuf lz4Buffer(byte[] buf, int start, int length) {
    if (length < 4) {
      throw corrupt("lz4 payload shorter than its size prefix");
    }
    return declared("lz4", le32(buf, start));
  }

  /** A buffer for a payload that declares {@code size} uncompressed bytes, refused above the bound. */
  private ArrowBuf declared(String codec, long size) {
    if (size < 0 || size > MAX_UNCOMPRESSED_BYTES) {
      throw corrupt(codec + " payload claims " + Long.toUnsignedString(size) + " uncompressed bytes (> "
          + MAX_UNCOMPRESSED_BYTES + ")");
    }
    ArrowBuf raw = allocator.buffer(Math.max(size, 1));
    raw.writerIndex(size);
    return raw;
  }

  /** The compressed bytes in a direct buffer, for the JNI codecs that read only direct memory. */
  private ArrowBuf direct(byte[] buf, int start, int length) {
    ArrowBuf src = allocator.buffer(Math.max(length, 1));
    src.setBytes(0, buf, start, length);
    return src;
  }

  private static long le32(byte[] buf, int at) {
    return ByteBuffer.wrap(buf, at, 4).order(ByteOrder.LITTLE_ENDIAN).getInt() & 0xFFFFFFFFL;
  }

  /** RFC 1952 members (payload.py writes one); the size declared is the last trailer's ISIZE. */
  private ArrowBuf gunzip(byte[] buf, int start, int length) {
    if (length < 18) {
      throw corrupt("gzip payload of " + length + " bytes is shorter than a gzip member");
    }
    long size = le32(buf, start + length - 4);
    ArrowBuf raw = declared("gzip", size);
    Inflater inflater = new Inflater(true);
    try {
      ByteBuffer dest = raw.nioBuffer(0, (int) size);
      int end = start + length;
      int at = start;
      while (at < end) {
        at = gzipHeader(buf, at, end);
        inflater.reset();
        inflater.setInput(buf, at, end - at);
        int memberStart = dest.position();
        while (!inflater.finished()) {
          int before = inflater.getRemaining();
          int n = inflater.inflate(dest);
          if (n == 0 && inflater.getRemaining() == before && !inflater.finished()) {
            throw corrupt(!dest.hasRemaining() ? "gzip payload inflates past the " + size + " bytes it declares"
                : inflater.needsInput() ? "gzip payload ends inside its deflate stream"
                : "gzip payload does not decompress: no progress");
          }
        }
        at = end - inflater.getRemaining();
        if (end - at < 8) {
          throw corrupt("gzip member ends without its trailer");
        }
        CRC32 crc = new CRC32();
        crc.update(raw.nioBuffer(memberStart, dest.position() - memberStart));
        if (crc.getValue() != le32(buf, at) || ((dest.position() - memberStart) & 0xFFFFFFFFL) != le32(buf, at + 4)) {
          throw corrupt("gzip member's CRC32 or size disagrees with its trailer");
        }
        at += 8;
      }
      if (dest.position() != size) {
        throw corrupt("gzip payload inflated to " + dest.position() + " bytes, it declares " + size);
      }
      return raw;
    } catch (DataFormatException e) {
      raw.close();
      throw corrupt("gzip payload does not decompress: " + e.getMessage());
    } catch (RuntimeException e) {
      raw.close();
      throw e;
    } finally {
      inflater.end();
    }
  }

  /** Where the deflate data of the member at {@code at} starts (RFC 1952 2.3: optional fields skipped). */
  private int gzipHeader(byte[] buf, int at, int end) {
    if (end - at < 10 || (buf[at] & 0xFF) != 0x1f || (buf[at + 1] & 0xFF) != 0x8b || buf[at + 2] != 8
        || (buf[at + 3] & 0xE0) != 0) {
      throw corrupt("gzip payload holds something other than a gzip member");
    }
    int flags = buf[at + 3];
    int p = at + 10;
    if ((flags & 0x04) != 0) {  // FEXTRA
      p = p + 2 > end ? end + 1 : p + 2 + ((buf[p] & 0xFF) | (buf[p + 1] & 0xFF) << 8);
    }
    for (int field : new int[] {0x08, 0x10}) {  // FNAME, FCOMMENT: zero-terminated
      if ((flags & field) != 0) {
        while (p < end && buf[p] != 0) {
          p++;
        }
        p++;
      }
    }
    if ((flags & 0x02) != 0) {  // FHCRC: the low 16 bits of the header's CRC32
      if (p + 2 <= end) {
        CRC32 crc = new CRC32();
        crc.update(buf, at, p - at);
        if ((crc.getValue() & 0xFFFF) != ((buf[p] & 0xFF) | (buf[p + 1] & 0xFF) << 8)) {
          throw corrupt("gzip member's header CRC disagrees with its header");
        }
      }
      p += 2;
    }
    if (p > end) {
      throw corrupt("gzip payload ends inside a member's header");
    }
    return p;
  }

  /** snappy's raw block: a varint preamble with the size, then the compressed bytes. */
  private ArrowBuf unsnappy(byte[] buf, int start, int length) {
    long size;
    try {
      size = Snappy.uncompressedLength(buf, start, length);
    } catch (java.io.IOException | SnappyError e) {
      throw corrupt("snappy payload has no size preamble: " + e.getMessage());
    }
    ArrowBuf raw = declared("snappy", size);
    try (ArrowBuf src = direct(buf, start, length)) {
      // Exactly the preamble's size: snappy's decoder writes exactly that many bytes or fails.
      int got = Snappy.uncompress(src.nioBuffer(0, length), raw.nioBuffer(0, (int) size));
      if (got != size) {
        throw corrupt("snappy payload inflated to " + got + " bytes, it declares " + size);
      }
      return raw;
    } catch (java.io.IOException | SnappyError e) {
      raw.close();
      throw corrupt("snappy payload does not decompress: " + e.getMessage());
    } catch (RuntimeException e) {
      raw.close();
      throw e;
    }
  }

  /** A zstd frame whose header declares its content size (RFC 8878 3.1.1.1), read as payload.py does. */
  private ArrowBuf unzstd(byte[] buf, int start, int length) {
    if (length < 6 || le32(buf, start) != 0xFD2FB528L) {
      throw corrupt("zstd payload does not start with a zstd frame");
    }
    int descriptor = buf[start + 4] & 0xFF;
    int singleSegment = (descriptor >> 5) & 1;
    int sizeBytes = new int[] {singleSegment, 2, 4, 8}[descriptor >> 6];
    if (sizeBytes == 0) {
      throw corrupt("zstd frame does not declare its content size");
    }
    int at = start + 5 + (1 - singleSegment) + new int[] {0, 1, 2, 4}[descriptor & 3];
    if (at + sizeBytes > start + length) {
      throw corrupt("zstd payload ends inside its frame header");
    }
    long size = 0;
    for (int i = sizeBytes - 1; i >= 0; i--) {
      size = size << 8 | (buf[at + i] & 0xFF);
    }
    size += sizeBytes == 2 ? 256 : 0;
    ArrowBuf raw = declared("zstd", size);
    try (ArrowBuf src = direct(buf, start, length)) {
      long got = Zstd.decompressDirectByteBuffer(raw.nioBuffer(0, (int) size), 0, (int) size,
          src.nioBuffer(0, length), 0, length);
      if (Zstd.isError(got)) {
        throw corrupt("zstd payload does not decompress into its " + size + " declared bytes: "
            + Zstd.getErrorName(got));
      }
      if (got != size) {
        throw corrupt("zstd payload inflated to " + got + " bytes, it declares " + size);
      }
      return raw;
    } catch (com.github.luben.zstd.ZstdException e) {  // zstd-jni throws some errors, returns others
      raw.close();
      throw corrupt("zstd payload does not decompress into its " + size + " declared bytes: " + e.getMessage());
    } catch (RuntimeException e) {
      raw.close();
      throw e;
    }
  }

  /** A decoded payload: buffers are slices of the inflated payload. */
  static final class Payload {
    int count;
    int keyNulls;
    int valueNulls;
    ArrowBuf[] keyBufs;
    ArrowBuf[] valueBufs;
    ArrowBuf timestampDeltas;
    ArrowBuf offsetDeltas;
    List<List<Object[]>> headers;
  }

  private static long pad(long n) {
    return (8 - n % 8) % 8;
  }

  /** Magic 2: u32 header size, msgpack [count, key nulls, value nulls, sizes[8], headers], 8 buffers. */
  private Payload arrowLayout(ArrowBuf raw, int count, Lz4Prefix lz4) {
    long total = raw.writerIndex();
    if (total < 4) {
      throw corrupt("payload shorter than its header size");
    }
    inflated(lz4, 4);
    long headerSize = raw.getInt(0) & 0xFFFFFFFFL;
    if (headerSize > total - 4) {
      throw corrupt("payload header size " + headerSize + " runs past the " + total + " payload bytes");
    }
    inflated(lz4, 4 + headerSize);
    byte[] header = new byte[(int) headerSize];
    raw.getBytes(4, header);
    Payload p = new Payload();
    long[] sizes = new long[8];
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(header)) {
      if (u.unpackArrayHeader() != 5) {
        throw corrupt("payload header must be an array of 5 fields");
      }
      p.count = u.unpackInt();
      p.keyNulls = u.unpackInt();
      p.valueNulls = u.unpackInt();
      if (u.unpackArrayHeader() != 8) {
        throw corrupt("payload buffer sizes must be 8 integers");
      }
      for (int i = 0; i < 8; i++) {
        sizes[i] = u.unpackLong();
      }
      p.headers = withHeaders ? unpackHeaders(u, count) : null;
    } catch (java.io.IOException | org.msgpack.core.MessagePackException e) {
      throw corrupt("payload header is not msgpack: " + e.getMessage());
    }
    if (p.count != count) {
      throw corrupt("payload holds " + p.count + " records, the batch header says " + count);
    }
    long at = 4 + headerSize;
    at += pad(at);
    ArrowBuf[] bufs = new ArrowBuf[8];
    for (int i = 0; i < 8; i++) {
      if (sizes[i] < 0 || at + sizes[i] > total) {
        throw corrupt("payload buffer of " + sizes[i] + " bytes at " + at + " runs past the " + total + " bytes");
      }
      bufs[i] = raw.slice(at, sizes[i]);
      at += sizes[i] + pad(sizes[i]);
    }
    if (sizes[6] != 8L * count) {
      throw corrupt("payload timestamp deltas hold " + sizes[6] + " bytes for " + count + " records");
    }
    if (sizes[7] != 0 && sizes[7] != 4L * count) {
      throw corrupt("payload offset deltas hold " + sizes[7] + " bytes for " + count + " records");
    }
    // Offset deltas (a compacted batch) come last, and every read of a window needs them.
    boolean whole = lz4 == null || sizes[7] != 0;
    inflated(lz4, whole ? total : bufs[2].memoryAddress() - raw.memoryAddress() + sizes[2]);
    if (lz4 != null && whole && !lz4.finished()) {
      throw corrupt("lz4 payload inflates past the " + total + " bytes it declares");
    }
    checkBinary("key", p.keyNulls, count, sizes[0], sizes[1], sizes[2], bufs[0], bufs[1]);
    p.keyBufs = new ArrowBuf[] {bufs[0], bufs[1], bufs[2]};
    if (whole) {
      checkBinary("value", p.valueNulls, count, sizes[3], sizes[4], sizes[5], bufs[3], bufs[4]);
      p.valueBufs = new ArrowBuf[] {bufs[3], bufs[4], bufs[5]};
      p.timestampDeltas = bufs[6];
    }
    if (sizes[7] != 0) {
      checkOffsetDeltas(bufs[7], count);
      p.offsetDeltas = bufs[7];
    }
    return p;
  }

  /** With {@code lz4} (a payload inflated on demand), inflate at least its first {@code n} bytes. */
  private void inflated(Lz4Prefix lz4, long n) {
    if (lz4 == null) {
      return;
    }
    try {
      lz4.ensure(n);
    } catch (IllegalArgumentException e) {
      throw corrupt("lz4 payload does not decompress: " + e.getMessage());
    }
  }

  /** What payload.py's decoder checks: a CRC only proves the bytes are the producer's, and Arrow
   *  would read out of bounds (or throw its own errors) on offsets that are not a run. */
  /** Offsets only grow within a batch; the window search and the offset column rely on it. */
  private void checkOffsetDeltas(ArrowBuf deltas, int count) {
    long previous = -1;
    for (int i = 0; i < count; i++) {
      int d = deltas.getInt(4L * i);
      if (d <= previous) {
        throw corrupt("payload offset deltas must be non-negative and strictly increase (record " + i + ")");
      }
      previous = d;
    }
  }

  private void checkBinary(String name, int nulls, int count, long validityBytes, long offsetBytes, long dataBytes,
      ArrowBuf validity, ArrowBuf offsets) {
    if (nulls < 0 || nulls > count) {
      throw corrupt("payload " + name + " null count " + nulls + " is not within 0.." + count);
    }
    if (nulls == count) {
      if (validityBytes != 0 || offsetBytes != 0 || dataBytes != 0) {
        throw corrupt("payload " + name + " column is all null but carries buffers");
      }
      return;
    }
    if (validityBytes != (nulls == 0 ? 0 : (count + 7) / 8)) {
      throw corrupt("payload " + name + " validity bitmap holds " + validityBytes + " bytes for " + count
          + " records and " + nulls + " nulls");
    }
    if (nulls > 0) {
      int present = 0;
      for (int i = 0; i < count; i++) {
        present += (validity.getByte(i >> 3) >> (i & 7)) & 1;
      }
      if (count - present != nulls) {
        throw corrupt("payload " + name + " validity bitmap disagrees with its null count " + nulls);
      }
    }
    if (offsetBytes != 4L * (count + 1)) {
      throw corrupt("payload " + name + " offsets hold " + offsetBytes + " bytes, not " + 4L * (count + 1));
    }
    int previous = offsets.getInt(0);
    if (previous != 0 || offsets.getInt(4L * count) != dataBytes) {
      throw corrupt("payload " + name + " offsets do not run from 0 to " + dataBytes);
    }
    for (int i = 1; i <= count; i++) {
      int at = offsets.getInt(4L * i);
      if (at < previous) {
        throw corrupt("payload " + name + " offsets decrease at record " + i);
      }
      previous = at;
    }
  }

  private List<List<Object[]>> unpackHeaders(MessageUnpacker u, int count) throws java.io.IOException {
    if (u.getNextFormat().getValueType() == ValueType.NIL) {
      u.unpackNil();
      return null;
    }
    int n = u.unpackArrayHeader();
    if (n != count) {
      throw corrupt("payload headers must be null or one list per record");
    }
    List<List<Object[]>> out = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      if (u.getNextFormat().getValueType() == ValueType.NIL) {
        u.unpackNil();
        out.add(null);
        continue;
      }
      int pairs = u.unpackArrayHeader();
      List<Object[]> own = new ArrayList<>(pairs);
      for (int j = 0; j < pairs; j++) {
        u.unpackArrayHeader();
        String key = u.unpackString();
        byte[] value = null;
        if (u.getNextFormat().getValueType() == ValueType.NIL) {
          u.unpackNil();
        } else {
          value = u.readPayload(u.unpackBinaryHeader());
        }
        own.add(new Object[] {key, value});
      }
      out.add(own);
    }
    return out;
  }

  /** Magic 1 (logs written before the Arrow layout): msgpack [keys, values, ts deltas, headers,
   *  offset deltas], copied here into the same buffers magic 2 has. */
  private Payload rowLayout(ArrowBuf raw, int count, Decoded out) {
    byte[] bytes = new byte[(int) raw.writerIndex()];
    raw.getBytes(0, bytes);
    Payload p = new Payload();
    p.count = count;
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(bytes)) {
      if (u.unpackArrayHeader() != 5) {
        throw corrupt("payload must be an array of 5 columns");
      }
      byte[][] keys = unpackBins(u, count);
      byte[][] values = unpackBins(u, count);
      if (u.unpackArrayHeader() != count) {
        throw corrupt("payload column timestamp_deltas does not hold " + count + " records");
      }
      p.timestampDeltas = owned(allocator.buffer(8L * count), out);
      for (int i = 0; i < count; i++) {
        p.timestampDeltas.setLong(8L * i, u.unpackLong());
      }
      p.headers = unpackHeaders(u, count);
      if (u.getNextFormat().getValueType() == ValueType.NIL) {
        u.unpackNil();
      } else {
        if (u.unpackArrayHeader() != count) {
          throw corrupt("payload offset deltas must be one int per record");
        }
        p.offsetDeltas = owned(allocator.buffer(4L * count), out);
        for (int i = 0; i < count; i++) {
          p.offsetDeltas.setInt(4L * i, u.unpackInt());
        }
      }
      p.keyNulls = nulls(keys);
      p.valueNulls = nulls(values);
      p.keyBufs = binaryBuffers(keys, out);
      p.valueBufs = binaryBuffers(values, out);
    } catch (java.io.IOException | org.msgpack.core.MessagePackException e) {
      throw corrupt("payload is not a msgpack column set: " + e.getMessage());
    }
    return p;
  }

  private static ArrowBuf owned(ArrowBuf buf, Decoded out) {
    out.owned.add(buf::close);
    return buf;
  }

  private static int nulls(byte[][] items) {
    int n = 0;
    for (byte[] b : items) {
      n += b == null ? 1 : 0;
    }
    return n;
  }

  private ArrowBuf[] binaryBuffers(byte[][] items, Decoded out) {
    int count = items.length;
    long total = 0;
    for (byte[] b : items) {
      total += b == null ? 0 : b.length;
    }
    ArrowBuf validity = owned(allocator.buffer((count + 7) / 8 + 1), out);
    validity.setZero(0, validity.capacity());
    ArrowBuf offsets = owned(allocator.buffer(4L * (count + 1)), out);
    ArrowBuf data = owned(allocator.buffer(Math.max(total, 1)), out);
    long at = 0;
    offsets.setInt(0, 0);
    for (int i = 0; i < count; i++) {
      if (items[i] != null) {
        validity.setByte(i / 8, validity.getByte(i / 8) | (1 << (i % 8)));
        data.setBytes(at, items[i]);
        at += items[i].length;
      }
      offsets.setInt(4L * (i + 1), (int) at);
    }
    return new ArrowBuf[] {validity, offsets, data};
  }

  private byte[][] unpackBins(MessageUnpacker u, int count) throws java.io.IOException {
    if (u.unpackArrayHeader() != count) {
      throw corrupt("payload column does not hold " + count + " records");
    }
    byte[][] out = new byte[count][];
    for (int i = 0; i < count; i++) {
      if (u.getNextFormat().getValueType() == ValueType.NIL) {
        u.unpackNil();
      } else {
        out[i] = u.readPayload(u.unpackBinaryHeader());
      }
    }
    return out;
  }

  private RaylogSparkException corrupt(String what) {
    return new RaylogSparkException("CorruptRecordError", topic + "-" + partition + ": " + what);
  }

  /** A ColumnarBatch and the buffers it reads, released together. */
  static final class Decoded implements AutoCloseable {
    ColumnarBatch batch;
    long nextOffset;
    final List<AutoCloseable> owned = new ArrayList<>();

    @Override
    public void close() {
      RuntimeException first = null;
      for (int i = owned.size() - 1; i >= 0; i--) {
        try {
          owned.get(i).close();
        } catch (Exception e) {
          first = first != null ? first : new IllegalStateException(e);
        }
      }
      owned.clear();
      if (first != null) {
        throw first;
      }
    }
  }
}
