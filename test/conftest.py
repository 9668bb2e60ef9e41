"""Fixtures, and the environment of every test run: DDS on loopback in a domain of its own."""

import os

# Registers the CI rule: a skip for a missing part of the environment fails under CI=true.
from ci_skips import pytest_runtest_makereport  # noqa: F401
from configs import REPO, small_config
from jax_perception_node.config import PipelineConfig
import pytest

# DDS never leaves loopback; the domain is per run so parallel runs do not cross-talk.
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ.setdefault('ROS_DOMAIN_ID', str(10 + os.getpid() % 80))
# Big messages over shared memory, UDP on loopback only: see config/fastdds_local.xml.
os.environ.setdefault('FASTRTPS_DEFAULT_PROFILES_FILE', str(REPO / 'config' / 'fastdds_local.xml'))


@pytest.fixture
def tiny_cfg() -> PipelineConfig:
    """small_config() with two cameras."""
    return small_config()
