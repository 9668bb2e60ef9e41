"""Fixtures, and the environment of every test run: DDS on loopback in a domain of its own."""

import atexit
import os
import shutil
import tempfile

# Registers the CI rule: a skip for a missing part of the environment fails under CI=true.
from ci_skips import pytest_runtest_makereport  # noqa: F401
from configs import REPO, small_config, TEST_STORE
from jax_perception_node.settings.config import PipelineConfig
import pytest
from ros_harness import DOMAIN_BLOCK, DOMAIN_BLOCK_SIZE

# DDS never leaves loopback; the domain is per run so parallel runs do not cross-talk. Under
# pytest-xdist (make test runs two workers, which inherit the run's domain) each worker moves
# it into a block of domains of its own (ros_harness.domain_block), so no two workers' nodes
# share a domain either.
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ.setdefault('ROS_DOMAIN_ID', str(10 + os.getpid() % 80))
if 'PYTEST_XDIST_WORKER' in os.environ:
    os.environ['ROS_DOMAIN_ID'] = str(
        DOMAIN_BLOCK + int(os.environ['ROS_DOMAIN_ID']) % DOMAIN_BLOCK_SIZE)
if TEST_STORE not in os.environ:     # the run's own (workers inherit it), removed at its end
    os.environ[TEST_STORE] = tempfile.mkdtemp(prefix='jax-perception-test-store-')
    atexit.register(shutil.rmtree, os.environ[TEST_STORE], True)
# Big messages over shared memory, UDP on loopback only: see config/fastdds_local.xml.
os.environ.setdefault('FASTRTPS_DEFAULT_PROFILES_FILE', str(REPO / 'config' / 'fastdds_local.xml'))


@pytest.fixture
def tiny_cfg() -> PipelineConfig:
    """small_config() with two cameras."""
    return small_config()


@pytest.fixture(scope='module')
def warmed():
    """
    Return ``cfg -> BevPipeline``, warmed up: one pipeline per config and test module.

    A module's tests share a pipeline (a warm-up compiles every bucket); another module gets
    its own, so state a test leaves (calibration, sweep ring) never crosses modules.
    """
    from jax_perception_node.core.pipeline import BevPipeline
    pipelines = {}

    def warmed_pipeline(cfg: PipelineConfig) -> BevPipeline:
        if cfg not in pipelines:
            pipelines[cfg] = BevPipeline(cfg)
            pipelines[cfg].warmup()
        return pipelines[cfg]
    return warmed_pipeline


@pytest.fixture(scope='module')
def pipe(warmed):
    """Return the module's warmed pipeline on small_config(): a 32 x 48 grid, two cameras."""
    return warmed(small_config())
