package io.raylog.spark;

/**
 * A raylog error raised in Spark's JVM: {@code errorClass} is the name of raylog's Python error
 * (OffsetOutOfRangeError, UnknownTopicOrPartitionError, ...), so spark_bridge can raise the same
 * type in Python and a Scala or SQL user reads the same words as a Python one.
 */
public class RaylogSparkException extends RuntimeException {
  private final String errorClass;

  public RaylogSparkException(String errorClass, String message) {
    super(errorClass + ": " + message);
    this.errorClass = errorClass;
  }

  public RaylogSparkException(String errorClass, String message, Throwable cause) {
    super(errorClass + ": " + message, cause);
    this.errorClass = errorClass;
  }

  public String errorClass() {
    return errorClass;
  }
}
