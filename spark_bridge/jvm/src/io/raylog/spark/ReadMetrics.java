package io.raylog.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * Where a read's task time goes, as Spark SQL metrics of the scan node (summed over tasks):
 * time waiting for the leader's fetch answers, time inflating and laying out batches, bytes
 * fetched and records handed to Spark. What is left of a task's time is Spark's own work on
 * the batches; and bytes inflated, which a read of keys alone keeps to the payloads' key
 * columns (BatchDecoder). bench/spark_bench.py --profile prints them.
 */
public final class ReadMetrics {
  static final String FETCH_WAIT = "raylogFetchWaitMs";
  static final String DECODE = "raylogDecodeMs";
  static final String BYTES = "raylogFetchedBytes";
  static final String RECORDS = "raylogRecords";
  static final String INFLATED = "raylogInflatedBytes";

  private ReadMetrics() {}

  /** The raylog metrics of the last SQL execution of {@code spark}, by description (for benchmarks). */
  public static java.util.Map<String, String> lastExecution(org.apache.spark.sql.SparkSession spark) {
    org.apache.spark.sql.execution.ui.SQLAppStatusStore store = spark.sharedState().statusStore();
    org.apache.spark.sql.execution.ui.SQLExecutionUIData last = store.executionsList().last();
    scala.collection.immutable.Map<Object, String> values = store.executionMetrics(last.executionId());
    java.util.Map<String, String> out = new java.util.TreeMap<>();
    for (org.apache.spark.sql.execution.ui.SQLPlanMetric m
        : scala.collection.JavaConverters.seqAsJavaList(last.metrics())) {
      scala.Option<String> v = values.get(m.accumulatorId());
      if (m.name().startsWith("raylog: ") && v.isDefined()) {
        out.put(m.name(), v.get());
      }
    }
    return out;
  }

  static CustomMetric[] supported() {
    return new CustomMetric[] {
        new Sum(FETCH_WAIT, "raylog: time waiting for fetches (ms)"),
        new Sum(DECODE, "raylog: time decoding batches (ms)"),
        new Sum(BYTES, "raylog: bytes fetched"),
        new Sum(RECORDS, "raylog: records read"),
        new Sum(INFLATED, "raylog: bytes inflated")};
  }

  static CustomTaskMetric[] values(long fetchWaitMs, long decodeMs, long bytes, long records, long inflated) {
    return new CustomTaskMetric[] {value(FETCH_WAIT, fetchWaitMs), value(DECODE, decodeMs), value(BYTES, bytes),
        value(RECORDS, records), value(INFLATED, inflated)};
  }

  private static CustomTaskMetric value(String name, long v) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return v;
      }
    };
  }

  /** A metric summed over tasks; public with a no-argument constructor because Spark makes it by name. */
  public static class Sum extends CustomSumMetric {
    private final String name;
    private final String description;

    public Sum() {
      this("", "");
    }

    Sum(String name, String description) {
      this.name = name;
      this.description = description;
    }

    @Override
    public String name() {
      return name;
    }

    @Override
    public String description() {
      return description;
    }
  }
}
