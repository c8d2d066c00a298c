package io.raylog.spark;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Long columns computed on access from a batch's base value and its delta buffer, so a query
 * that reads offsets or timestamps costs no per-record work before Spark asks for a value.
 * The delta buffers are slices of the batch's inflated payload, released with it.
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

  /** A non-null long column; everything but getLong is refused. */
  abstract static class LongColumn extends ColumnVector {
    LongColumn(DataType type) {
      super(type);
    }

    @Override
    public void close() {}

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
