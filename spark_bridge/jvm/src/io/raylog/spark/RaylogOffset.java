package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream's position as JSON in Spark's checkpoint: the Kafka source's own shape,
 * {"topic": {"0": 23, "1": 45}}, so its offsets read the same, and under "@raylog" (no topic can be
 * named so) each topic's id and each partition's leader epoch of the record before its offset,
 * from which the planner finds a topic re-created or a log that diverged (spark_bridge.planner).
 */
final class RaylogOffset extends Offset {
  static final String RAYLOG_KEY = "@raylog";

  final TreeMap<String, TreeMap<Integer, Long>> offsets;
  final TreeMap<String, TreeMap<Integer, Long>> epochs;
  final TreeMap<String, String> ids;

  RaylogOffset(TreeMap<String, TreeMap<Integer, Long>> offsets) {
    this(offsets, new TreeMap<>(), new TreeMap<>());
  }

  RaylogOffset(TreeMap<String, TreeMap<Integer, Long>> offsets, TreeMap<String, TreeMap<Integer, Long>> epochs,
      TreeMap<String, String> ids) {
    this.offsets = offsets;
    this.epochs = epochs;
    this.ids = ids;
  }

  static RaylogOffset parse(String json) {
    try {
      return of(RayCalls.JSON.readTree(json));
    } catch (java.io.IOException e) {
      throw new RaylogSparkException("InvalidConfigError", "not a raylog stream offset: " + json);
    }
  }

  static RaylogOffset of(JsonNode node) {
    TreeMap<String, String> ids = new TreeMap<>();
    JsonNode extra = node.path(RAYLOG_KEY);
    Iterator<Map.Entry<String, JsonNode>> named = extra.path("ids").fields();
    while (named.hasNext()) {
      Map.Entry<String, JsonNode> t = named.next();
      ids.put(t.getKey(), t.getValue().asText());
    }
    return new RaylogOffset(perPartition(node), perPartition(extra.path("epochs")), ids);
  }

  private static TreeMap<String, TreeMap<Integer, Long>> perPartition(JsonNode node) {
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    Iterator<Map.Entry<String, JsonNode>> topics = node.fields();
    while (topics.hasNext()) {
      Map.Entry<String, JsonNode> t = topics.next();
      if (t.getKey().equals(RAYLOG_KEY)) {
        continue;
      }
      TreeMap<Integer, Long> parts = new TreeMap<>();
      Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().fields();
      while (ps.hasNext()) {
        Map.Entry<String, JsonNode> p = ps.next();
        parts.put(Integer.parseInt(p.getKey()), p.getValue().asLong());
      }
      out.put(t.getKey(), parts);
    }
    return out;
  }

  Long get(String topic, int partition) {
    TreeMap<Integer, Long> parts = offsets.get(topic);
    return parts == null ? null : parts.get(partition);
  }

  /** The leader epoch of the record before {@code topic}-{@code partition}'s offset; -1 when not known. */
  long epoch(String topic, int partition) {
    TreeMap<Integer, Long> parts = epochs.get(topic);
    Long epoch = parts == null ? null : parts.get(partition);
    return epoch == null ? -1 : epoch;
  }

  /** Adds a partition's position: its offset and the epoch of the record before it (-1: not known). */
  void put(String topic, int partition, long offset, long epoch) {
    offsets.computeIfAbsent(topic, k -> new TreeMap<>()).put(partition, offset);
    if (epoch >= 0) {
      epochs.computeIfAbsent(topic, k -> new TreeMap<>()).put(partition, epoch);
    }
  }

  @Override
  public String json() {
    Map<String, Object> out = new LinkedHashMap<>(offsets);
    if (!ids.isEmpty() || !epochs.isEmpty()) {
      Map<String, Object> extra = new LinkedHashMap<>();
      extra.put("ids", ids);
      extra.put("epochs", epochs);
      out.put(RAYLOG_KEY, extra);
    }
    try {
      return RayCalls.JSON.writeValueAsString(out);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}
