package io.raylog.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.PrunedScan;
import org.apache.spark.sql.sources.RelationProvider;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.LongAccumulator;
import scala.collection.JavaConverters;

/**
 * {@code format("raylog")}: Spark's Kafka source and sink, options and columns, over raylog's
 * replicas. Registered under the short name "raylog" (META-INF/services).
 */
public final class RaylogProvider implements TableProvider, DataSourceRegister, CreatableRelationProvider,
    RelationProvider {
  private static final Map<String, Long> WRITTEN = new ConcurrentHashMap<>();

  @Override
  public String shortName() {
    return "raylog";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    String headers = SourceOptions.normalized(options).get("includeheaders");
    return SourceOptions.schema(SourceOptions.flag(headers, false, "includeHeaders"));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new RaylogTable(schema);
  }

  /** {@code df.write.format("raylog").save()}: every row sent, once acknowledged, in append or Spark's
   *  default mode (a topic is never overwritten). */
  @Override
  public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
      scala.collection.immutable.Map<String, String> parameters, Dataset<Row> data) {
    if (mode == SaveMode.Overwrite || mode == SaveMode.Ignore) {
      throw new RaylogSparkException("InvalidConfigError", "save mode " + mode + " does not apply to a raylog topic "
          + "(append-only): write with mode append");
    }
    Map<String, String> options = JavaConverters.mapAsJavaMap(parameters);
    String namespace = options.getOrDefault("raylog.namespace", SourceOptions.namespaceOfSession());
    SinkSpec spec = new SinkSpec(data.schema(), options, namespace);
    if (spec.topic != null) {
      RayCalls.planner(namespace, "partition_count", spec.topic);  // an unknown topic fails before any task
    }
    LongAccumulator written = sqlContext.sparkContext().longAccumulator("raylog records written");
    data.queryExecution().toRdd().toJavaRDD().foreachPartition(rows -> {
      RecordSender sender = new RecordSender(spec);
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        sender.write(row);
      }
      written.add(sender.flush());
    });
    String id = options.get("raylog.write_id");
    if (id != null) {
      WRITTEN.put(id, written.value());
    }
    StructType schema = data.schema();
    return new BaseRelation() {
      @Override
      public SQLContext sqlContext() {
        return sqlContext;
      }

      @Override
      public StructType schema() {
        return schema;
      }
    };
  }

  /** A table of Spark's session catalog ({@code CREATE TABLE t USING raylog OPTIONS (...)}, then
   *  {@code SELECT}): Spark reads such tables through the V1 API, as it reads Kafka's (a
   *  RelationProvider too). Each scan is the V2 read of the same options, planned when it runs
   *  (the latest offsets then), with the columns the query needs. */
  @Override
  public BaseRelation createRelation(SQLContext sqlContext, scala.collection.immutable.Map<String, String> parameters) {
    Map<String, String> options = new java.util.HashMap<>(JavaConverters.mapAsJavaMap(parameters));
    options.remove("path");
    StructType schema = inferSchema(new CaseInsensitiveStringMap(options));
    return new CatalogRelation(sqlContext, options, schema);
  }

  private static final class CatalogRelation extends BaseRelation implements PrunedScan {
    private final SQLContext sqlContext;
    private final Map<String, String> options;
    private final StructType schema;

    CatalogRelation(SQLContext sqlContext, Map<String, String> options, StructType schema) {
      this.sqlContext = sqlContext;
      this.options = options;
      this.schema = schema;
    }

    @Override
    public SQLContext sqlContext() {
      return sqlContext;
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public RDD<Row> buildScan(String[] requiredColumns) {
      Dataset<Row> all = sqlContext.sparkSession().read().format("raylog").options(options).load();
      Column[] columns = new Column[requiredColumns.length];
      for (int i = 0; i < columns.length; i++) {
        columns[i] = all.col(requiredColumns[i]);
      }
      return all.select(columns).rdd();
    }
  }

  /** How many records the write given option raylog.write_id=id sent (spark_bridge.write's answer). */
  public static long written(String id) {
    Long n = WRITTEN.remove(id);
    return n == null ? -1 : n;
  }
}
