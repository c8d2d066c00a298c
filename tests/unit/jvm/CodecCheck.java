package io.raylog.spark;

import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * tests/unit/test_jvm_codec.py's way into the connector's package-private codec (hence this
 * package), with no Spark session and no Ray: the Python test hands it bytes or records in files
 * and compares what it prints with raylog's Python codec. Several cases go into one run because a
 * JVM start costs more than all the decoding.
 *
 *   decode  (BYTES FROM UNTIL)...   one JSON line per record of [FROM, UNTIL) ("case" = argument triple)
 *   encode  BATCHES.json OUT        per {producer_id, base_sequence, records} of BATCHES.json, an lz4 then
 *                                   an uncompressed batch, appended to OUT, and a line {"size": size()}
 *   murmur2 KEYS                    Murmur2.hash of each hex key, one per line
 *
 * Results are the stdout lines that start with '{': Ray's log4j2.xml, first on the classpath,
 * sends Arrow's INFO lines to stdout too.
 */
public final class CodecCheck {
  static final String TOPIC = "events-\u00e9";
  static final int PARTITION = 7;
  static final String[] COLUMNS = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
      "headers"};
  // ASCII out, so names like the topic's come back intact whatever the JVM's stdout encoding is.
  private static final ObjectMapper JSON = JsonMapper.builder().enable(JsonWriteFeature.ESCAPE_NON_ASCII).build();
  private static final HexFormat HEX = HexFormat.of();

  public static void main(String[] args) throws IOException {
    switch (args[0]) {
      case "decode":
        decode(args);
        break;
      case "encode":
        encode(args[1], args[2]);
        break;
      case "local":
        // local <directory> <offset> <maxBytes> <leaderEpoch> ...: LocalSegments.read of each, hex or null.
        try (LocalSegments local = new LocalSegments(args[1])) {
          for (int c = 0; 3 * c + 4 < args.length; c++) {
            byte[] got = local.read(Long.parseLong(args[3 * c + 2]), Integer.parseInt(args[3 * c + 3]),
                Integer.parseInt(args[3 * c + 4]));
            println(got == null ? JSON.createObjectNode().putNull("data")
                : JSON.createObjectNode().put("data", HEX.formatHex(got)).put("hw", local.highWatermark));
          }
        }
        break;
      case "murmur2":
        for (String line : Files.readAllLines(Paths.get(args[1]))) {
          println(JSON.createObjectNode().put("key", line.strip()).put("hash", Murmur2.hash(HEX.parseHex(line.strip()))));
        }
        break;
      default:
        throw new IllegalArgumentException("unknown mode " + args[0]);
    }
    System.out.flush();
  }

  private static void decode(String[] args) throws IOException {
    // Closing the root allocator throws if any decode (or error path) left a buffer unreleased.
    try (BufferAllocator root = new RootAllocator()) {
      for (int c = 0; 3 * c + 3 < args.length; c++) {
        byte[] buf = Files.readAllBytes(Paths.get(args[3 * c + 1]));
        long from = Long.parseLong(args[3 * c + 2]);
        long until = Long.parseLong(args[3 * c + 3]);
        BatchDecoder decoder = new BatchDecoder(TOPIC, PARTITION, COLUMNS, root);
        try {
          // Every batch, not only those RangeReaders would pick: the decoder itself must return
          // nothing for a batch outside the window.
          for (BatchDecoder.Header h : BatchDecoder.headers(buf)) {
            try (BatchDecoder.Decoded d = decoder.decode(buf, h, from, until)) {
              if (d != null) {
                print(c, d.batch);
              }
            }
          }
        } catch (RaylogSparkException e) {
          println(JSON.createObjectNode().put("case", c).put("error", e.getMessage()));
        } catch (RuntimeException e) {
          // Anything but raylog's error is a crash the test reports by name, without losing the other cases.
          println(JSON.createObjectNode().put("case", c).put("crash", e.toString()));
        }
      }
    }
  }

  private static void print(int c, ColumnarBatch b) throws IOException {
    for (int i = 0; i < b.numRows(); i++) {
      ObjectNode r = JSON.createObjectNode().put("case", c);
      r.put("key", hex(b.column(0), i));
      r.put("value", hex(b.column(1), i));
      r.put("topic", b.column(2).getUTF8String(i).toString());
      r.put("partition", b.column(3).getInt(i));
      r.put("offset", b.column(4).getLong(i));
      r.put("timestamp", b.column(5).getLong(i));
      r.put("timestampType", b.column(6).getInt(i));
      ArrayNode headers = r.putArray("headers");
      ColumnarArray pairs = b.column(7).getArray(i);
      for (int j = 0; j < pairs.numElements(); j++) {
        InternalRow pair = pairs.getStruct(j, 2);
        headers.addArray().add(pair.getUTF8String(0).toString())
            .add(pair.isNullAt(1) ? null : HEX.formatHex(pair.getBinary(1)));
      }
      println(r);
    }
  }

  private static void println(JsonNode line) throws IOException {
    System.out.println(JSON.writeValueAsString(line));
  }

  private static String hex(ColumnVector v, int i) {
    return v.isNullAt(i) ? null : HEX.formatHex(v.getBinary(i));
  }

  private static void encode(String in, String out) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    // One encoder for every batch, emptied between them as RecordSender reuses its last one: a
    // batch must not carry anything of the one before (headers, nulls, stale padding).
    BatchEncoder e = new BatchEncoder();
    for (JsonNode batch : JSON.readTree(Files.readAllBytes(Paths.get(in)))) {
      for (boolean lz4 : new boolean[] {true, false}) {
        for (JsonNode r : batch.get("records")) {
          e.add(bin(r.get("key")), bin(r.get("value")), r.get("timestamp").asLong(), headers(r.get("headers")));
        }
        byte[] encoded = e.encode(lz4, batch.get("producer_id").asLong(), batch.get("base_sequence").asInt());
        JsonNode restamp = batch.get("restamp");  // [producer epoch, base sequence]: as RecordSender starts over
        if (restamp != null) {
          BatchEncoder.restamp(encoded, (short) restamp.get(0).asInt(), restamp.get(1).asInt());
        }
        bytes.write(encoded);
        if (!lz4) {
          println(JSON.createObjectNode().put("size", e.size()));
        }
        e.reset();
      }
    }
    Files.write(Paths.get(out), bytes.toByteArray());
  }

  private static byte[] bin(JsonNode hex) {
    return hex == null || hex.isNull() ? null : HEX.parseHex(hex.asText());
  }

  /** [[name, hex value or null], ...] or null, as RecordSender passes them. */
  private static List<Object[]> headers(JsonNode pairs) {
    if (pairs == null || pairs.isNull()) {
      return null;
    }
    List<Object[]> out = new ArrayList<>();
    for (JsonNode p : pairs) {
      out.add(new Object[] {p.get(0).asText(), bin(p.get(1))});
    }
    return out;
  }
}
