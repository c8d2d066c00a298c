"""Spark on Ray through RayDP: DataFrames in and out of topics (a later issue fills this package)."""
