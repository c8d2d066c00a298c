package io.raylog.spark;

import java.util.Map;
import org.apache.spark.SparkThrowable;

/**
 * A raylog error raised in Spark's JVM: {@code errorClass} is the name of raylog's Python error
 * (OffsetOutOfRangeError, UnknownTopicOrPartitionError, ...), so spark_bridge can raise the same
 * type in Python and a Scala or SQL user reads the same words as a Python one. A SparkThrowable,
 * as Spark's own errors (and the Kafka source's) are: {@code getErrorClass()} is that name, and
 * the message its one parameter.
 */
public class RaylogSparkException extends RuntimeException implements SparkThrowable {
  private final String errorClass;
  private final String detail;

  public RaylogSparkException(String errorClass, String message) {
    super(errorClass + ": " + message);
    this.errorClass = errorClass;
    this.detail = message;
  }

  public RaylogSparkException(String errorClass, String message, Throwable cause) {
    super(errorClass + ": " + message, cause);
    this.errorClass = errorClass;
    this.detail = message;
  }

  public String errorClass() {
    return errorClass;
  }

  @Override
  public String getErrorClass() {
    return errorClass;
  }

  @Override
  public Map<String, String> getMessageParameters() {
    return Map.of("message", detail == null ? "" : detail);
  }
}
