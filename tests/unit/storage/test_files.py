"""Checkpoint and text-value files: written atomically and made durable, rename included."""

from raylog.storage import files
from tests.unit.storage.disk_calls import directory_synced_after


def test_write_checkpoint_fsyncs_the_directory_after_the_rename(tmp_path, disk_calls):
    """Finding 17: without it a power loss can bring back the old checkpoint, or none."""
    path = tmp_path / files.LOG_START_OFFSET_FILE
    files.write_checkpoint(path, 42)
    assert directory_synced_after(disk_calls, tmp_path, "replace", path)
    assert files.read_checkpoint(path) == 42


def test_write_text_value_fsyncs_the_directory_after_the_rename(tmp_path, disk_calls):
    path = tmp_path / files.PARTITION_METADATA_FILE
    files.write_text_value(path, "raylog-partition 1", "topic-id")
    assert directory_synced_after(disk_calls, tmp_path, "replace", path)
    assert files.read_text_value(path) == "topic-id"
