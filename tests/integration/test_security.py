"""The trust model, tested (issue 19): raylog trusts what Ray admits, and keeps Ray's gate shut.

Fault model: a hostile or careless caller. Topic names come from users and become directory
names: any name (traversal, separators, NUL, 300 characters, names that are legal but look like
paths) is refused or lands under the data directory, whether it comes through the admin client or
straight at the controller. Ray's token authentication (on by default in Ray 2.60) is what keeps
strangers out of the cluster: a raylog-started Ray must have it on, a process without the token
must be refused, and every process raylog starts (its actors, the Spark workers, tested in
tests/spark) must hold the token.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import hypothesis
import hypothesis.strategies as st
import pytest
import ray

from raylog.errors import InvalidRequestError, InvalidTopicError, RaylogError
from raylog.naming import CONTROLLER_ACTOR_NAME
from tests.support.faults import another_user_can_run, intrude_channels

pytestmark = pytest.mark.ray

names = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["..", ".", "../x", "a/../../b", "/abs", "x\0y", "a\\b", "~root", "$HOME", "x" * 250, ""]),
    st.text(alphabet="./-_", min_size=1, max_size=8),
)


def files_outside(data_root: Path) -> set[str]:
    """Every path beside ``data_root`` (under its parent) but those inside a cluster's data directory:
    this module's, and earlier modules' (``raylog-data<N>``), whose replicas may still be writing a
    checkpoint as their Ray shuts down (a fresh-clone run saw one's ``.tmp`` come and go). A new
    entry beside them is still seen."""
    outside = data_root.parent
    prefix = data_root.name.rstrip("0123456789")
    return {str(p) for p in outside.rglob("*")
            if len(parts := p.relative_to(outside).parts) == 1 or not parts[0].startswith(prefix)}


@pytest.mark.parametrize("topic_id", ["../../../tmp/escape0123456789abcdef", "0" * 31, "0" * 33, "A" * 32,
                                      "0123456789abcdef/123456789abcdef", 12345, b"0" * 32])
def test_a_topic_id_that_is_not_32_hex_digits_is_refused_and_creates_nothing(cluster, data_root, topic_id):
    """The caller picks the topic id (so a rerun of the call is idempotent) and it names the partition
    directories: anything but 32 lowercase hex digits is refused before a path is made."""
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    before = files_outside(data_root)
    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(controller.create_topic.remote("id-checked", 1, 1, {}, topic_id=topic_id))
    assert isinstance(info.value.cause, InvalidRequestError), info.value
    assert "id-checked" not in cluster.admin().list_topics()
    assert files_outside(data_root) == before


def test_topic_names_never_reach_a_path_outside_the_data_directory(cluster, data_root, seed):
    admin = cluster.admin()
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    before = files_outside(data_root)
    created: list[str] = []

    @hypothesis.settings(max_examples=60, deadline=None, database=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.seed(seed)
    @hypothesis.given(names)
    def try_name(name):
        for create in (lambda: admin.create_topic(name, 1),
                       lambda: ray.get(controller.create_topic.remote(name, 1, 1, {}))):
            try:
                create()
            except ray.exceptions.RayTaskError as exc:
                assert isinstance(exc.cause, InvalidTopicError) or isinstance(exc.cause, RaylogError), exc
                continue
            except InvalidTopicError:
                continue
            except RaylogError as exc:  # a legal name created twice
                assert "already exists" in str(exc)
                continue
            created.append(name)

    try_name()
    for name in set(created):
        for p in admin.describe_topics([name])[0].partitions:
            for replica in p.replicas:
                resolved = Path(replica.directory).resolve()
                assert resolved.is_relative_to(data_root.resolve()), (name, replica.directory)
    assert files_outside(data_root) == before, "nothing written outside the data directory"
    if created:
        admin.delete_topics(sorted(set(created)))


def test_rays_token_authentication_is_on_and_a_process_without_the_token_is_refused(cluster, tmp_path):
    from ray._raylet import AuthenticationMode, get_authentication_mode

    assert get_authentication_mode() == AuthenticationMode.TOKEN

    @ray.remote(num_cpus=0)
    def mode_in_a_worker() -> int:
        from ray._raylet import get_authentication_mode as mode

        return int(mode())

    assert ray.get(mode_in_a_worker.remote()) == int(AuthenticationMode.TOKEN), "Ray's workers hold the token"
    address = ray.get_runtime_context().gcs_address
    probe = ("import ray, raylog; ray.init(address=%r, namespace='raylog', log_to_driver=False); "
             "print(len(raylog.connect(address=%r).admin().list_topics()) >= 0)") % (address, address)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    # Ray's client retries a refused token once a second for gcs_rpc_server_connect_timeout_s
    # (20 s) before it gives up: the GCS's first refusal is the event waited for, then the
    # stranger is stopped. Had it been let in, it would print True and exit.
    stranger = subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"})
    said = []
    try:
        for line in stranger.stdout:
            said.append(line)
            if "InvalidAuthToken" in line:
                break
    finally:
        stranger.kill()
        stranger.wait(timeout=60)
        stranger.stdout.close()
    assert said and "InvalidAuthToken" in said[-1], (
        "a process with the wrong token was not refused: " + "".join(said)[-2000:])
    assert "True\n" not in said, "a process with the wrong token was let in"
    probe = "import raylog; print(len(raylog.connect().admin().list_topics()) >= 0)"
    env.pop("RAY_ADDRESS", None)
    member = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert member.returncode == 0 and "True" in member.stdout, (
        "raylog.connect() in another process (as the raylog CLI) presents the token: " + member.stderr[-2000:])


# --- the same-node fast paths (issue 31): the produce channel and the partition files ---------------

@contextlib.contextmanager
def traversable_by_others(directory: Path):
    """Let other users traverse ``directory`` (a data root) and its ancestors (pytest's temporary
    directories are 0700) while the test runs, so that raylog's own modes alone decide what they
    can read below it."""
    changed = []
    for d in [directory, *directory.parents]:
        mode = d.stat().st_mode & 0o777
        if not mode & 0o001:
            os.chmod(d, mode | 0o001)
            changed.append((d, mode))
    try:
        yield
    finally:
        for d, mode in changed:
            os.chmod(d, mode)


def test_a_process_of_another_user_can_neither_append_through_the_channel_nor_read_the_files(cluster, data_root):
    """Findings 1 and 2 of issue 31, as they were confirmed: a process Ray would refuse found the
    replica's name in /proc/net/unix, connected, sent a 3-record batch built from the documented
    header, and the log end went from 10 to 13; it could read the segment files too."""
    why = another_user_can_run()
    if why:
        pytest.skip(why)
    from raylog import TopicPartition
    from tests.support.topics import fresh_topic

    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(10)]).wait(60)
    info = cluster.admin().describe_partitions(topic)[0]
    leader = cluster.metadata.leader(topic, 0)
    ray.get(leader.read_location.remote())  # the channel listens from the first lookup on
    tp = TopicPartition(topic, 0)
    assert cluster.admin().end_offsets([tp])[tp] == 10
    topic_id = cluster.admin().describe_topics([topic])[0].topic_id
    segment = next(Path(info["directory"]).glob("*.log"))
    with traversable_by_others(data_root):
        refused, answered, readable = intrude_channels(f"@raylog/{topic_id}/", [str(segment)])
    assert refused + answered >= 1, "the intruder found the channel's name, as any local user can"
    assert answered == 0, "a channel answered a process of another user"
    assert readable == 0, "a process of another user read a segment file"
    assert cluster.admin().end_offsets([tp])[tp] == 10, "the log did not change"
    assert producer.send(topic, b"ours").get(60).offset == 10, "the replica's own producers are served"
    producer.close()


def test_partition_files_are_the_replicas_users_alone(cluster, data_root):
    """Finding 2 of issue 31: segment files, indexes and the read page were 0644 and directories
    followed the umask (0755): every local user could read every record."""
    from tests.support.topics import fresh_topic

    topic = fresh_topic(cluster, 2)
    producer = cluster.producer()
    producer.send_batch(topic, [b"x" * 100] * 5000).wait(60)
    producer.close()
    directories = {Path(i["directory"]) for i in cluster.admin().describe_partitions(topic)}
    checked = 0
    for directory in directories:
        for path in [directory, *directory.rglob("*")]:
            try:
                info = path.stat()
            except FileNotFoundError:
                # A checkpoint's temporary file (the high watermark's, a moment after the sends),
                # renamed since the listing: gone, it is no one's to read.
                continue
            mode = info.st_mode & 0o777
            assert mode == (0o700 if stat.S_ISDIR(info.st_mode) else 0o600), f"{path} is {oct(mode)}"
            checked += 1
    for path in (data_root, data_root / "meta.properties", data_root / "controller"):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is {oct(path.stat().st_mode & 0o777)}"
    assert checked > 10
