package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/** A stream's position: the next offset per topic and partition, as JSON in Spark's checkpoint in
 *  the Kafka source's own shape, {"topic": {"0": 23, "1": 45}}, so its offsets read the same. */
final class RaylogOffset extends Offset {
  final TreeMap<String, TreeMap<Integer, Long>> offsets;

  RaylogOffset(TreeMap<String, TreeMap<Integer, Long>> offsets) {
    this.offsets = offsets;
  }

  static RaylogOffset parse(String json) {
    try {
      return of(RayCalls.JSON.readTree(json));
    } catch (java.io.IOException e) {
      throw new RaylogSparkException("InvalidConfigError", "not a raylog stream offset: " + json);
    }
  }

  static RaylogOffset of(JsonNode node) {
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    Iterator<Map.Entry<String, JsonNode>> topics = node.fields();
    while (topics.hasNext()) {
      Map.Entry<String, JsonNode> t = topics.next();
      TreeMap<Integer, Long> parts = new TreeMap<>();
      Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().fields();
      while (ps.hasNext()) {
        Map.Entry<String, JsonNode> p = ps.next();
        parts.put(Integer.parseInt(p.getKey()), p.getValue().asLong());
      }
      out.put(t.getKey(), parts);
    }
    return new RaylogOffset(out);
  }

  Long get(String topic, int partition) {
    TreeMap<Integer, Long> parts = offsets.get(topic);
    return parts == null ? null : parts.get(partition);
  }

  @Override
  public String json() {
    try {
      return RayCalls.JSON.writeValueAsString(offsets);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}
