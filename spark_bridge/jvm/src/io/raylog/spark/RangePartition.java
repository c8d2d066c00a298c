package io.raylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Records [from, until) of one partition, read where its leader was when planned. The leader
 *  epoch of the record before {@code until} (-1: not known) and the topic's id go back to the
 *  planner when a reader finds the log changed under it (SparkPlanner.remaining). */
final class RangePartition implements InputPartition {
  final String topic;
  final int partition;
  final long from;
  final long until;
  final String host;
  final int untilEpoch;
  final String topicId;
  /** The leader when planned, as the planner's "leader" answer (null: ask it): a task starts with
   *  it instead of asking the planner, and asks only after a call to it failed. */
  final Leader leader;

  /** The planner's answer about a partition's leader (SparkPlanner.leader). */
  static final class Leader implements java.io.Serializable {
    final String name;
    final int epoch;
    final String rayNodeId;
    final String directory;

    Leader(String name, int epoch, String rayNodeId, String directory) {
      this.name = name;
      this.epoch = epoch;
      this.rayNodeId = rayNodeId;
      this.directory = directory;
    }

    static Leader of(com.fasterxml.jackson.databind.JsonNode found) {
      return found == null || found.isMissingNode() || found.isNull() ? null
          : new Leader(found.path("name").asText(""), found.path("epoch").asInt(-1),
              found.path("ray_node_id").asText(""), found.path("directory").asText(""));
    }
  }

  RangePartition(String topic, int partition, long from, long until, String host, int untilEpoch, String topicId,
      Leader leader) {
    this.topic = topic;
    this.partition = partition;
    this.from = from;
    this.until = until;
    this.host = host;
    this.untilEpoch = untilEpoch;
    this.topicId = topicId;
    this.leader = leader;
  }

  @Override
  public String[] preferredLocations() {
    return host == null || host.isEmpty() ? new String[0] : new String[] {host};
  }

  String describe() {
    return topic + "-" + partition + " [" + from + ", " + until + ")";
  }
}
