package io.raylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Records [from, until) of one partition, read where its leader was when planned. */
final class RangePartition implements InputPartition {
  final String topic;
  final int partition;
  final long from;
  final long until;
  final String host;

  RangePartition(String topic, int partition, long from, long until, String host) {
    this.topic = topic;
    this.partition = partition;
    this.from = from;
    this.until = until;
    this.host = host;
  }

  @Override
  public String[] preferredLocations() {
    return host == null || host.isEmpty() ? new String[0] : new String[] {host};
  }

  String describe() {
    return topic + "-" + partition + " [" + from + ", " + until + ")";
  }
}
