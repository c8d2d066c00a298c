"""The Kafka listener with SASL and TLS (issue 34): users from `raylog users`, logins by real
clients (kafka-python, confluent-kafka) over SASL_SSL with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512; wrong passwords and connections that skip the login are refused."""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import sys
import uuid

import pytest

from raylog.records import TopicPartition
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.ray]

OPENSSL = shutil.which("openssl")
PASSWORD = "s3cret-pw"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    if OPENSSL is None:
        pytest.skip("openssl is not installed: no certificate for the TLS listener")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem"), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=120)
    return str(d / "cert.pem"), str(d / "key.pem")


@pytest.fixture(scope="module")
def cluster(data_root, tls_files):
    import ray

    import raylog

    cert, key = tls_files
    c = raylog.connect(data_root=str(data_root), num_cpus=2, object_store_memory=300 * 1024 * 1024,
                       cluster_config={"kafka_listener_sasl": True, "kafka_listener_tls_cert": cert,
                                       "kafka_listener_tls_key": key})
    yield c
    ray.shutdown()


@pytest.fixture(scope="module")
def user(cluster):
    name = "alice"
    done = subprocess.run([sys.executable, "-m", "raylog.cli", "users", "add", name, "--password-stdin"],
                          input=PASSWORD + "\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([sys.executable, "-m", "raylog.cli", "users", "list"], capture_output=True, text=True,
                            timeout=300)
    assert name in listed.stdout and PASSWORD not in listed.stdout
    return name


def kafka_python_config(bootstrap, cert, mechanism, user, password) -> dict:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_SSL", "ssl_cafile": cert,
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}


def confluent_config(bootstrap, cert, mechanism, user, password) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": cert,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_logs_in_over_tls_and_produces_and_consumes(cluster, tls_files, user, mechanism):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = cluster.bootstrap_servers
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    cluster.admin().create_topic(topic, 1)
    config = kafka_python_config(bootstrap, tls_files[0], mechanism, user, PASSWORD)
    producer = KafkaProducer(acks="all", **config)
    producer.send(topic, key=b"k", value=mechanism.encode()).get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(group_id=None, auto_offset_reset="earliest", consumer_timeout_ms=60_000, **config)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        record = next(iter(consumer))
    finally:
        consumer.close()
    assert (record.key, record.value) == (b"k", mechanism.encode())


def test_confluent_kafka_logs_in_with_scram_over_tls(cluster, tls_files, user):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    cluster.admin().create_topic(topic, 1)
    config = confluent_config(cluster.bootstrap_servers, tls_files[0], "SCRAM-SHA-256", user, PASSWORD)
    producer = confluent_kafka.Producer({**config, "enable.idempotence": True})
    producer.produce(topic, b"over tls")
    assert producer.flush(60) == 0
    read = []
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    try:
        wait_for(lambda: read.extend(r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs) or read,
                 timeout_s=60)
    finally:
        consumer.close()
    assert read == [b"over tls"]


def test_a_wrong_password_is_refused(cluster, tls_files, user):
    # confluent-kafka reports the broker's refusal as it happens (error_cb); kafka-python's
    # KafkaProducer retries its bootstrap for bootstrap_timeout_ms (30 s) before it raises.
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    cluster.admin().create_topic(topic, 1)
    errors = []
    producer = confluent_kafka.Producer({
        **confluent_config(cluster.bootstrap_servers, tls_files[0], "SCRAM-SHA-512", user, "not-it"),
        "error_cb": errors.append})
    producer.produce(topic, b"must not land")
    try:
        def refused():
            producer.poll(0.2)
            return any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)

        wait_for(refused, timeout_s=120)
    finally:
        producer.purge()
        producer.flush(30)
    assert cluster.admin().end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 0}


def test_a_connection_that_skips_the_login_is_closed_before_any_request_is_served(cluster, tls_files):
    host, port = cluster.bootstrap_servers.rsplit(":", 1)
    context = ssl.create_default_context(cafile=tls_files[0])
    with socket.create_connection((host, int(port)), timeout=60) as raw:
        with context.wrap_socket(raw, server_hostname=host) as sock:
            body = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", -1)  # Metadata v1, all topics
            sock.sendall(struct.pack(">i", len(body)) + body)
            try:
                assert sock.recv(4) == b""
            except (ConnectionResetError, ssl.SSLError):
                pass


def test_a_network_address_is_refused_without_sasl():
    from raylog.config import ClusterConfig
    from raylog.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="SASL"):
        ClusterConfig(kafka_listener="0.0.0.0:9092")
    assert ClusterConfig(kafka_listener="0.0.0.0:9092", kafka_listener_sasl=True).kafka_listener_sasl
