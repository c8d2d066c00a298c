package io.raylog.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * raylog topics as a Spark table: batch and micro-batch reads, and streaming writes. Batch
 * writes go through the provider's V1 path (as Spark's Kafka source does), so
 * {@code df.write.format("raylog").save()} works in Spark's default save mode.
 */
final class RaylogTable implements SupportsRead, SupportsWrite {
  private final StructType schema;

  RaylogTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "raylog";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.STREAMING_WRITE,
        TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new RaylogScanBuilder(new SourceOptions(options));
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    String namespace = info.options().getOrDefault("raylog.namespace", SourceOptions.namespaceOfSession());
    SinkSpec spec = new SinkSpec(info.schema(), info.options(), namespace);
    return new WriteBuilder() {
      @Override
      public Write build() {
        return new Write() {
          @Override
          public StreamingWrite toStreaming() {
            return new TopicStreamingWrite(spec);
          }
        };
      }
    };
  }

  /** writeStream.format("raylog"): each epoch's tasks send their rows and commit once acknowledged;
   *  at-least-once (a re-run epoch sends again), as Spark's Kafka sink. */
  static final class TopicStreamingWrite implements StreamingWrite {
    private final SinkSpec spec;

    TopicStreamingWrite(SinkSpec spec) {
      this.spec = spec;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      SinkSpec s = spec;
      return (partitionId, taskId, epochId) -> new RecordSender(s);
    }

    @Override
    public boolean useCommitCoordinator() {
      return false;
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {}

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {}
  }
}
