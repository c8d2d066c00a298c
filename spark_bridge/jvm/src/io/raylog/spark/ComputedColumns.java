package io.raylog.spark;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Columns read on access from a batch's inflated payload, so a query costs no per-record work
 * before Spark asks for a value: offsets and timestamps from a base value and a delta buffer,
 * keys and values from the payload's Arrow binary buffers. The buffers are slices of the
 * payload, released with it.
 */
final class ComputedColumns {
  private ComputedColumns() {}

  /** Record offsets: base + index, or base + the int32 delta a compacted batch keeps per record. */
  static final class Offsets extends LongColumn {
    private final long base;
    private final int first;
    private final ArrowBuf deltas;

    Offsets(long base, int first, ArrowBuf deltas) {
      super(DataTypes.LongType);
      this.base = base;
      this.first = first;
      this.deltas = deltas;
    }

    @Override
    public long getLong(int rowId) {
      int i = first + rowId;
      return deltas == null ? base + i : base + deltas.getInt(4L * i);
    }
  }

  /** Record timestamps in Spark's microseconds: (base timestamp + int64 delta) ms * 1000. */
  static final class Timestamps extends LongColumn {
    private final long baseMs;
    private final int first;
    private final ArrowBuf deltas;

    Timestamps(long baseMs, int first, ArrowBuf deltas) {
      super(DataTypes.TimestampType);
      this.baseMs = baseMs;
      this.first = first;
      this.deltas = deltas;
    }

    @Override
    public long getLong(int rowId) {
      return (baseMs + deltas.getLong(8L * (first + rowId))) * 1000L;
    }
  }

  /**
   * Keys or values: rows [first, first + n) of the payload's Arrow binary column (validity
   * bitmap, int32 offsets, data), read by address. BatchDecoder checked the offsets (from 0,
   * never decreasing, ending at the data's size) and the bitmap against the null count before
   * this is made, so no read leaves the buffers. Against Spark's ArrowColumnVector over the same
   * buffers it skips Arrow's bounds checks per read and copies no window at a range's edges.
   */
  static final class Binary extends Column {
    private final long validity;
    private final long offsets;
    private final long data;
    private final int first;
    private final int n;
    private final boolean anyNull;

    /** {@code validity} null when the column has no null. */
    Binary(ArrowBuf validity, ArrowBuf offsets, ArrowBuf data, int first, int n) {
      super(DataTypes.BinaryType);
      this.validity = validity == null ? 0 : validity.memoryAddress();
      this.offsets = offsets.memoryAddress() + 4L * first;
      this.data = data.memoryAddress();
      this.first = first;
      this.n = n;
      this.anyNull = validity != null;
    }

    @Override
    public boolean hasNull() {
      return anyNull && numNulls() > 0;
    }

    @Override
    public int numNulls() {
      int nulls = 0;
      for (int i = 0; anyNull && i < n; i++) {
        nulls += isNullAt(i) ? 1 : 0;
      }
      return nulls;
    }

    @Override
    public boolean isNullAt(int rowId) {
      int i = first + rowId;
      return anyNull && ((Platform.getByte(null, validity + (i >> 3)) >> (i & 7)) & 1) == 0;
    }

    @Override
    public byte[] getBinary(int rowId) {
      if (isNullAt(rowId)) {
        return null;
      }
      long at = offsets + 4L * rowId;
      int start = Platform.getInt(null, at);
      int length = Platform.getInt(null, at + 4) - start;
      byte[] bytes = new byte[length];
      Platform.copyMemory(null, data + start, bytes, Platform.BYTE_ARRAY_OFFSET, length);
      return bytes;
    }

    /** Every row counted in {@code counts} where it lies, no {@code byte[]} made. */
    void countInto(KeyCounts counts) {
      int start = Platform.getInt(null, offsets);
      for (int rowId = 0; rowId < n; rowId++) {
        int end = Platform.getInt(null, offsets + 4L * (rowId + 1));
        if (isNullAt(rowId)) {
          counts.addNulls(1);
        } else {
          counts.add(null, data + start, end - start);
        }
        start = end;
      }
    }
  }

  /** A non-null long column; everything but getLong is refused. */
  abstract static class LongColumn extends Column {
    LongColumn(DataType type) {
      super(type);
    }

    @Override
    public boolean hasNull() {
      return false;
    }

    @Override
    public int numNulls() {
      return 0;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return false;
    }
  }

  /** A column that owns nothing (its buffers are the payload's) and refuses every read its type has not. */
  abstract static class Column extends ColumnVector {
    Column(DataType type) {
      super(type);
    }

    @Override
    public void close() {}

    @Override
    public boolean getBoolean(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte getByte(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public short getShort(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public int getInt(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public float getFloat(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public double getDouble(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
      throw new UnsupportedOperationException();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
      throw new UnsupportedOperationException();
    }

    @Override
    public long getLong(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte[] getBinary(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      throw new UnsupportedOperationException();
    }
  }
}
