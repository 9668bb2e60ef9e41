# Two commands do all the set-up: `make demo` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# tf2_msgs, grid_map_msgs, vision_msgs, autoware_internal_debug_msgs, autoware_perception_msgs,
# autoware_internal_msgs and bond have no wheels: built from interfaces/ into the venv, again
# only when a file there or the ROS wheels change.
INTERFACES_STAMP := $(VENV)/.interfaces
INTERFACES := $(shell find interfaces -type f -not -path '*/__pycache__/*')
# Every ROS process we start stays on loopback; tests, demo and benchmarks each pick a
# ROS_DOMAIN_ID of their own (from the process id) unless one is set.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export FASTRTPS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_local.xml
# Bytecode is written at a module's first import, once: pip installs none (--no-compile: it
# compiles all 13.7k modules on one core, 80 of its 126 s here, where a run imports a few
# thousand). Where PYTHONDONTWRITEBYTECODE is set, every process would compile what it imports.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv test demo bench soak fuzz lint clean

venv: $(STAMP) $(INTERFACES_STAMP)

$(STAMP): requirements.txt requirements-dev.txt requirements.lock setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements-dev.txt -c requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

$(INTERFACES_STAMP): $(STAMP) $(INTERFACES)
	$(PY) interfaces/build_interfaces.py --prefix $(VENV) --jobs 2

# Two workers, a test file each at a time (module fixtures warm one pipeline per file): on 2
# cores 8 min against 13 one after the other, since most of a ROS test waits on processes.
test: venv
	$(PY) -m pytest -q -n 2 --dist loadfile test

demo: venv
	$(VENV)/bin/jax-perception demo --out demo_out

bench: venv
	$(VENV)/bin/jax-perception bench --json bench_out/bench.json

soak: venv
	JAX_PERCEPTION_SOAK_S=600 JAX_PERCEPTION_SOAK_JSON=soak_out/soak.json $(PY) -m pytest -q -s -m soak test

fuzz: venv
	JAX_PERCEPTION_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q -k fuzz test/unit/test_cloud_fuzz.py test/unit/test_camera.py

lint: venv
	$(PY) -m pytest -q test/lint

clean:
	rm -rf $(VENV) demo_out bench_out soak_out .pytest_cache
