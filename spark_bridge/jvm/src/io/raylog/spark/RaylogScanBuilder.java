package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A read of raylog planned on Spark's driver: the planner resolves the options into offset
 * ranges (one per partition, split to minPartitions) with the leader's node for each; pushed
 * filters on partition and offset narrow the ranges exactly (so Spark need not evaluate them
 * again); pruned columns are never built; COUNT(*), alone or grouped by topic or partition, is
 * answered per range from its offsets (topics without compaction only: a compacted log has
 * gaps); COUNT(*) grouped by key (and topic or partition) is counted in the tasks as they read
 * the keys, Spark summing the tasks' counts.
 */
final class RaylogScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
    SupportsPushDownAggregates {
  private static final Logger LOG = LoggerFactory.getLogger(RaylogScanBuilder.class);

  private static final Set<String> NEVER_NULL =
      new HashSet<>(java.util.Arrays.asList("topic", "partition", "offset", "timestamp", "timestampType"));
  /** Columns COUNT(*) can be grouped by in the tasks: a range's topic and partition are one value. */
  private static final Set<String> GROUPABLE = Set.of("key", "topic", "partition");

  private final SourceOptions options;
  private StructType required;
  private Filter[] pushed = new Filter[0];
  private Set<Integer> partitions;
  private long lowOffset = Long.MIN_VALUE;
  private long highOffset = Long.MAX_VALUE;
  private boolean countOnly;
  private String[] grouping = new String[0];
  private List<RangePartition> planned;
  private Set<String> compacted;

  RaylogScanBuilder(SourceOptions options) {
    this.options = options;
    this.required = options.schema();
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.required = requiredSchema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> kept = new ArrayList<>();
    List<Filter> taken = new ArrayList<>();
    for (Filter f : filters) {
      (narrow(f) ? taken : kept).add(f);
    }
    pushed = taken.toArray(new Filter[0]);
    return kept.toArray(new Filter[0]);
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed;
  }

  /** Applies a filter on partition or offset to the ranges to read; false when it cannot. */
  private boolean narrow(Filter f) {
    if (f instanceof IsNotNull && NEVER_NULL.contains(((IsNotNull) f).attribute())) {
      return true;  // Spark adds these next to every comparison; the scan never yields such a null
    }
    String column;
    Object value;
    if (f instanceof In && ((In) f).attribute().equals("partition")) {
      Set<Integer> allowed = new HashSet<>();
      for (Object v : ((In) f).values()) {
        if (!(v instanceof Integer || v instanceof Long)) {
          return false;
        }
        long p = ((Number) v).longValue();
        if (p >= 0 && p <= Integer.MAX_VALUE) {
          allowed.add((int) p);
        }
      }
      keepPartitions(allowed);
      return true;
    }
    if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      value = ((EqualTo) f).value();
    } else if (f instanceof GreaterThan) {
      column = ((GreaterThan) f).attribute();
      value = ((GreaterThan) f).value();
    } else if (f instanceof GreaterThanOrEqual) {
      column = ((GreaterThanOrEqual) f).attribute();
      value = ((GreaterThanOrEqual) f).value();
    } else if (f instanceof LessThan) {
      column = ((LessThan) f).attribute();
      value = ((LessThan) f).value();
    } else if (f instanceof LessThanOrEqual) {
      column = ((LessThanOrEqual) f).attribute();
      value = ((LessThanOrEqual) f).value();
    } else {
      return false;
    }
    if (!(value instanceof Integer || value instanceof Long) || !(column.equals("partition") || column.equals("offset"))) {
      return false;
    }
    long v = ((Number) value).longValue();
    if (column.equals("partition")) {
      if (!(f instanceof EqualTo)) {
        return false;
      }
      Set<Integer> one = new HashSet<>();
      if (v >= 0 && v <= Integer.MAX_VALUE) {
        one.add((int) v);
      }
      keepPartitions(one);
      return true;
    }
    // Ranges end before Long.MAX_VALUE, so saturating v + 1 there keeps every bound exact.
    long next = v == Long.MAX_VALUE ? Long.MAX_VALUE : v + 1;
    if (f instanceof EqualTo) {
      lowOffset = Math.max(lowOffset, v);
      highOffset = Math.min(highOffset, next);
    } else if (f instanceof GreaterThan) {
      lowOffset = Math.max(lowOffset, next);
    } else if (f instanceof GreaterThanOrEqual) {
      lowOffset = Math.max(lowOffset, v);
    } else if (f instanceof LessThan) {
      highOffset = Math.min(highOffset, v);
    } else {
      highOffset = Math.min(highOffset, next);
    }
    return true;
  }

  private void keepPartitions(Set<Integer> allowed) {
    if (partitions == null) {
      partitions = allowed;
    } else {
      partitions.retainAll(allowed);
    }
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    AggregateFunc[] funcs = aggregation.aggregateExpressions();
    if (funcs.length != 1 || !isCountStar(funcs[0])) {
      return false;
    }
    Expression[] groupBy = aggregation.groupByExpressions();
    String[] columns = new String[groupBy.length];
    for (int i = 0; i < groupBy.length; i++) {
      if (!(groupBy[i] instanceof NamedReference) || ((NamedReference) groupBy[i]).fieldNames().length != 1
          || !GROUPABLE.contains(((NamedReference) groupBy[i]).fieldNames()[0])) {
        return false;
      }
      columns[i] = ((NamedReference) groupBy[i]).fieldNames()[0];
    }
    if (!RangeReaders.countsKeys(columns)) {
      plan();
      for (RangePartition r : planned) {
        if (compacted.contains(r.topic)) {
          return false;
        }
      }
    }
    countOnly = true;
    grouping = columns;
    return true;
  }

  private static boolean isCountStar(AggregateFunc f) {
    if (f instanceof CountStar) {
      return true;
    }
    if (f instanceof Count && !((Count) f).isDistinct()) {
      Expression e = ((Count) f).column();
      return e instanceof LiteralValue && ((LiteralValue<?>) e).value() != null;
    }
    return false;
  }

  @Override
  public Scan build() {
    StructType schema = required;
    if (countOnly) {
      schema = new StructType();
      for (String column : grouping) {
        schema = schema.add(options.schema().apply(column));
      }
      schema = schema.add("count(*)", DataTypes.LongType, false);
    }
    return new RaylogScan(this, schema);
  }

  /** The ranges to read: planned (a batch read only: a stream plans each micro-batch), then narrowed
   *  by the pushed filters. */
  List<RangePartition> ranges() {
    plan();
    List<RangePartition> ranges = new ArrayList<>();
    for (RangePartition r : planned) {
      if (partitions != null && !partitions.contains(r.partition)) {
        continue;
      }
      long from = Math.max(r.from, lowOffset);
      long until = Math.min(r.until, highOffset);
      if (until > from) {
        ranges.add(new RangePartition(r.topic, r.partition, from, until, r.host,
            until == r.until ? r.untilEpoch : -1, r.topicId, r.leader));
      }
    }
    return ranges;
  }

  /** The planner's ranges (or those spark_bridge.read pinned), once per scan. */
  private void plan() {
    if (planned != null) {
      return;
    }
    JsonNode answer;
    if (options.pinnedRanges != null) {
      try {
        answer = RayCalls.JSON.readTree(options.pinnedRanges);
      } catch (java.io.IOException e) {
        throw new RaylogSparkException("InvalidConfigError", SourceOptions.PINNED_RANGES + " is not JSON: "
            + e.getMessage());
      }
    } else {
      answer = RayCalls.planner(options.namespace, "plan", options.plannerJson());
    }
    for (JsonNode w : answer.path("warnings")) {
      LOG.warn("raylog: {}", w.asText());
    }
    planned = ranges(answer.get("ranges"));
    compacted = new HashSet<>();
    for (JsonNode t : answer.path("compacted")) {
      compacted.add(t.asText());
    }
  }

  static List<RangePartition> ranges(JsonNode ranges) {
    List<RangePartition> out = new ArrayList<>();
    for (JsonNode r : ranges) {
      out.add(new RangePartition(r.get("topic").asText(), r.get("partition").asInt(), r.get("from").asLong(),
          r.get("until").asLong(), r.path("leader").path("host").asText(""), r.path("until_epoch").asInt(-1),
          r.path("topic_id").asText(""), RangePartition.Leader.of(r.get("leader"))));
    }
    return out;
  }

  /** The scan: a batch of the planned ranges, or (streaming) a MicroBatchStream. */
  static final class RaylogScan implements Scan, Batch {
    private final RaylogScanBuilder builder;
    private final StructType schema;
    private List<RangePartition> ranges;

    RaylogScan(RaylogScanBuilder builder, StructType schema) {
      this.builder = builder;
      this.schema = schema;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "raylog " + (!builder.countOnly ? "columns " + String.join(",", schema.fieldNames())
              : "COUNT(*)" + (builder.grouping.length == 0 ? "" : " per " + String.join(",", builder.grouping))
              + (RangeReaders.countsKeys(builder.grouping) ? " counted in the tasks" : " from offsets"))
          + (builder.partitions == null ? "" : ", partitions " + builder.partitions)
          + (builder.lowOffset == Long.MIN_VALUE ? "" : ", offset >= " + builder.lowOffset)
          + (builder.highOffset == Long.MAX_VALUE ? "" : ", offset < " + builder.highOffset);
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return ReadMetrics.supported();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      for (String ending : new String[] {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}) {
        if (builder.options.forPlanner.containsKey(ending)) {
          throw new RaylogSparkException("InvalidConfigError", ending + " does not apply to a stream: it reads on as "
              + "records arrive (Spark's Kafka source refuses it too)");
        }
      }
      return new RaylogStream(builder.options, columns(schema), checkpointLocation);
    }

    @Override
    public InputPartition[] planInputPartitions() {
      if (ranges == null) {
        ranges = builder.ranges();
        if (builder.countOnly && builder.grouping.length == 0 && ranges.isEmpty()) {
          // Spark sums the ranges' counts; with no range at all that sum would be NULL, not 0.
          ranges = java.util.Collections.singletonList(new RangePartition("", 0, 0, 0, "", -1, "", null));
        }
      }
      return ranges.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new RangeReaders(builder.options.namespace, columns(schema), builder.options.failOnDataLoss,
          builder.countOnly, builder.grouping);
    }
  }

  static String[] columns(StructType schema) {
    List<String> out = new ArrayList<>();
    for (StructField f : schema.fields()) {
      out.add(f.name());
    }
    return out.toArray(new String[0]);
  }
}
