"""
Deskew on the synthetic drive at 20 m/s: the smear is gone, down to the parallax floor.

The drive is rendered as the LiDAR really sweeps and as an instant sweep at the same stamp
(``instant_sweep``); ``bench.lidar.smear`` compares their BEV occupancy above the ground, away
from moving traffic. A bag of the same drive replayed with ``lidar.time_field: time`` deskews
every frame whose ego motion the bag's odometry gives, and compiles nothing.
"""

from dataclasses import replace

from configs import small_params
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools.bench.common import bench_params, FULL
from jax_perception_node.tools.bench.lidar import smear
from jax_perception_node.tools.synthetic_drive import write_sample_bag
import pytest


@pytest.fixture(scope='module')
def lidar_pipe(warmed):
    params = bench_params(FULL, 0)
    params['buckets'] = [131072]
    return warmed(config_from_parameters(params))


def test_deskew_removes_the_smear_of_a_20_m_s_sweep(lidar_pipe):
    found = smear(lidar_pipe, times=(5.0, 8.0))
    assert found['deskewed_frames'] == 2
    # Measured: hundreds of static cells smeared; deskewed: no more than the parallax floor
    # (two exact sweeps half a rotation apart) and a few cells.
    assert found['differing_cells_measured'] > 200
    assert found['differing_cells_deskewed'] <= found['parallax_floor_cells'] * 1.3 + 5
    assert found['removed'] >= 0.75
    assert found['removed_above_floor'] >= 0.9


def test_a_bag_at_20_m_s_replays_deskewed_from_its_odometry(tmp_path):
    cfg = config_from_parameters(small_params(0, **{'buckets': [65536, 131072]}))
    bag = tmp_path / 'fast'
    write_sample_bag(bag, cfg, seconds=0.6, ego_speed=20.0)
    timed = replace(cfg, lidar_timing=replace(cfg.lidar_timing, field='time'))
    result = replay_bag(bag, tmp_path / 'out', timed)
    # The first sweep has no odometry 0.1 s before its stamp: served as measured, said so.
    assert (result.frames, result.deskewed, result.frames_without_motion) == (6, 5, 1)
    assert result.clouds_without_time == 0 and result.compiles_after_warmup == 0
    plain = replay_bag(bag, tmp_path / 'plain', cfg)
    assert plain.deskewed == plain.frames_without_motion == 0
