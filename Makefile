# Every target sets up what it needs itself and is safe to run twice.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Ray and Spark listen on loopback only (DESIGN.md).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export SPARK_LOCAL_IP := 127.0.0.1
export RAY_USAGE_STATS_ENABLED := 0

CHAOS_MINUTES ?= 30
SOAK_MINUTES ?= 60

.PHONY: venv bytecode jar tools test test-long test-unit demo bench bench-quick peers chaos soak lock clean

venv: $(STAMP)

# The Spark connector (spark_bridge/jvm): the JDK's javac against the jars the venv already holds
# (pyspark's, RayDP's, Ray's ray_dist.jar); no Maven, no download.
JVM     := spark_bridge/jvm
JAR     := $(JVM)/raylog-spark.jar
JAVA_SRC := $(wildcard $(JVM)/src/io/raylog/spark/*.java)

jar: $(JAR)

$(JAR): $(STAMP) $(JAVA_SRC) $(JVM)/resources/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister
	rm -rf $(JVM)/classes && mkdir -p $(JVM)/classes
	SP=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  javac --release 17 -nowarn -Xlint:-deprecation -d $(JVM)/classes \
	    -cp "$$SP/pyspark/jars/*:$$SP/raydp/jars/*:$$SP/ray/jars/ray_dist.jar" $(JAVA_SRC)
	cp -r $(JVM)/resources/META-INF $(JVM)/classes/
	jar cf $@.tmp -C $(JVM)/classes . && mv $@.tmp $@

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench]'
	touch $(STAMP)

# Every replica, coordinator and listener is a process of its own that imports raylog at start.
# Where PYTHONDONTWRITEBYTECODE is set (it is on these machines), Python writes no .pyc and each
# of those processes compiled raylog's modules from source again: ~180 ms of CPU and 6 MB per
# replica (bench.partitions_bench at 64, docs/performance.md). Python still reads a .pyc that
# exists, so they are written here, once per change.
bytecode: $(STAMP)
	$(PY) -m compileall -q raylog actors placement spark_bridge bench tests

# make test: everything but the longest fault scenarios (marked long in tests/conftest.py), which
# make test-long runs; CI (.ci/run) runs both.
# A failed run ends with the lines of Ray's logs that say why a process died (tests/support/postmortem.py).
# -X faulthandler keeps Python's fault handler on after pytest's own ends, so a crash as pytest's
# process exits prints every thread's stack (once, after 1,129 passed, a thread there jumped to a heap
# address). The flag, unlike PYTHONFAULTHANDLER, is not passed on to Ray's and Spark's processes.
pytest_explained = @start=$$(date +%s); set -x; $(PY) -X faulthandler -m pytest $(1) --durations=15 $(PYTEST_ARGS) || \
	{ $(PY) -m tests.support.postmortem --since $$start; exit 1; }

test: $(STAMP) bytecode $(JAR) tools
	$(call pytest_explained,-m "not long")

test-long: $(STAMP) bytecode $(JAR)
	$(call pytest_explained,-m long)

test-unit: $(STAMP) bytecode $(JAR)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

demo: $(STAMP) bytecode $(JAR) tools
	$(PY) -m bench.demo

# The benchmark suite (bench/__main__.py): Kafka's table, the peers beside raylog in the same run,
# throughput over stored data, each area's script, then the plots. Peers' servers come from Debian's
# packages (root or sudo; without them those peers are skipped with a line saying so).
bench: $(STAMP) bytecode $(JAR) peers
	$(PY) -m bench

bench-quick: $(STAMP) bytecode $(JAR) peers
	$(PY) -m bench --quick

# kcat, a judge of the Kafka listener (tests/integration/test_kafka_protocol.py), from Debian's package
# (root or sudo; without it those tests are skipped with a line saying so).
tools:
	@command -v kcat >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q kcat >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q kcat >/dev/null 2>&1; } || \
	  echo "could not install kcat: the tests that use it are skipped"; }

peers:
	@command -v redis-server >/dev/null && command -v nats-server >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q redis-server nats-server >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q redis-server nats-server >/dev/null 2>&1; } || \
	  echo "could not install redis-server and nats-server: the bench will skip those peers"; }

# Jepsen-style: seeded faults on a simulated cluster under producers, a consumer group and a Spark
# stream; every operation checked. Writes bench/results/chaos.json; fails on any anomaly.
chaos: $(STAMP) bytecode $(JAR)
	$(PY) -m tests.support.chaos --minutes $(CHAOS_MINUTES) --spark --out bench/results/chaos.json

# An hour of steady traffic with every raylog process's memory sampled; writes bench/results/soak.json.
soak: $(STAMP) bytecode $(JAR)
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES)

lock: $(STAMP)
	{ echo "# Exact versions installed by 'make' (pip -c). Regenerate with 'make lock' after changing pyproject.toml."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^raylog'; } > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis $(JVM)/classes $(JAR)
