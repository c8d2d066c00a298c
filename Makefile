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

.PHONY: venv test test-unit demo bench chaos soak lock clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m bench.demo

bench: $(STAMP)
	$(PY) -m bench.storage_bench
	$(PY) -m bench.client_bench
	$(PY) -m bench.replication_bench
	$(PY) -m bench.groups_bench
	$(PY) -m bench.spark_bench
	$(PY) -m bench.partitions_bench

# Jepsen-style: seeded faults on a simulated cluster under producers, a consumer group and a Spark
# stream; every operation checked. Writes bench/results/chaos.json; fails on any anomaly.
chaos: $(STAMP)
	$(PY) -m tests.support.chaos --minutes $(CHAOS_MINUTES) --spark --out bench/results/chaos.json

# An hour of steady traffic with every raylog process's memory sampled; writes bench/results/soak.json.
soak: $(STAMP)
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES)

lock: $(STAMP)
	{ echo "# Exact versions installed by 'make' (pip -c). Regenerate with 'make lock' after changing pyproject.toml."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^raylog'; } > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
