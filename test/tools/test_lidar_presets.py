"""LiDAR presets: the published beam tables, sweeps on those angles, and `sample-bag --lidar`."""

from dataclasses import replace

from configs import PARAMS_FILE
from jax_perception_node.bags.bagio import TYPESTORE as TS
from jax_perception_node.bags.topics import ODOMETRY_TOPIC, POINTCLOUD_TOPIC
from jax_perception_node.settings.config import load_config
from jax_perception_node.tools.cli import main
from jax_perception_node.tools.synthetic_drive import (LidarModel, POINT_DTYPE, PRESETS,
                                                       SyntheticDrive)
import numpy as np
import pytest
from rosbags.rosbag2 import Reader

# The published vertical angles (deg), written out here from the specifications: VLP-16 user
# manual (-15..15 by 2), HDL-32E manual (-30.67..10.67 by 4/3), Ouster OS1 datasheet (128
# uniform over +-22.5), Hesai Pandar64 manual (channel distribution). HDL-64E: the S3 datasheet
# gives +2 to -24.9 deg (26.9 deg), an upper block of 32 lasers about 1/3 deg apart and a lower
# block of 32 about 1/2 deg apart; the calibration table is checked against those.
VLP_16 = np.arange(-15.0, 15.5, 2.0)
HDL_32E = np.round((-92.0 + 4.0 * np.arange(32)) / 3.0, 2)
OS1_128 = -22.5 + np.arange(128) * 45.0 / 127.0
PANDAR64 = np.concatenate([[-25.0, -19.0], np.arange(-14.0, -6.5, 1.0),
                           np.arange(-36, 12) / 6.0, [2.0, 3.0, 5.0, 8.0, 11.0, 15.0]])
COLUMNS = {'VLP-16': 1800, 'HDL-32E': 2170, 'HDL-64E': 2083, 'OS1-128': 2048, 'Pandar64': 1800}
RANGE = {'VLP-16': 100.0, 'HDL-32E': 100.0, 'HDL-64E': 120.0, 'OS1-128': 120.0,
         'Pandar64': 200.0}


@pytest.fixture(scope='module')
def cfg():
    return load_config(PARAMS_FILE)


def degrees(model: LidarModel) -> np.ndarray:
    return np.degrees(model.elevations())


def test_preset_tables_are_the_published_angles():
    assert list(PRESETS) == ['VLP-16', 'HDL-32E', 'HDL-64E', 'OS1-128', 'Pandar64']
    for name, expected in (('VLP-16', VLP_16), ('HDL-32E', HDL_32E), ('OS1-128', OS1_128),
                           ('Pandar64', PANDAR64)):
        table = degrees(PRESETS[name])
        assert table.shape == expected.shape == (PRESETS[name].beams,), name
        assert np.allclose(table, expected, atol=1e-9), name
    assert np.allclose(np.diff(degrees(PRESETS['HDL-32E'])), 4.0 / 3.0, atol=0.011)
    # Pandar64: the dense band, 1/6 deg from -6 to +2 deg (49 beams), then 1 deg to -14 deg.
    pandar = degrees(PRESETS['Pandar64'])
    dense = pandar[(pandar >= -6.0 - 1e-9) & (pandar <= 2.0 + 1e-9)]
    assert len(dense) == 49 and np.allclose(np.diff(dense), 1.0 / 6.0)
    assert (pandar.min(), pandar.max()) == pytest.approx((-25.0, 15.0), abs=1e-9)

    hdl64 = degrees(PRESETS['HDL-64E'])
    assert hdl64.shape == (64,) and np.all(np.diff(hdl64) > 0)
    assert 26.6 <= hdl64[-1] - hdl64[0] <= 26.9
    assert -24.9 <= hdl64[0] <= -23.8 and 2.0 <= hdl64[-1] <= 2.9
    lower, upper = hdl64[:32], hdl64[32:]
    assert abs((upper[-1] - upper[0]) / 31 - 1.0 / 3.0) < 0.01
    assert abs((lower[-1] - lower[0]) / 31 - 0.5) < 0.02
    for name, model in PRESETS.items():
        assert (model.azimuth_steps, model.max_range_m, model.rotation_hz) == (
            COLUMNS[name], RANGE[name], 10.0), name
        assert model.beams == len(degrees(model))
    # Ouster publishes photon counts, the others 0-255.
    assert {n: m.intensity_scale for n, m in PRESETS.items()} == {
        'VLP-16': 1.0, 'HDL-32E': 1.0, 'HDL-64E': 1.0, 'OS1-128': 8.0, 'Pandar64': 1.0}


@pytest.mark.parametrize('name', list(PRESETS))
def test_a_sweep_of_each_preset_lies_on_its_table(cfg, name):
    table = degrees(PRESETS[name])
    # Fewer columns keep it fast; the beams are what is checked. t = 5 s: in town.
    model = replace(PRESETS[name], azimuth_steps=256)
    p = SyntheticDrive(cfg, num_cameras=0, lidar=model).lidar_frame(5.0)
    xyz = np.stack([p['x'], p['y'], p['z']], axis=-1).astype(np.float64)
    elevation = np.degrees(np.arcsin(xyz[:, 2] / np.linalg.norm(xyz, axis=1)))
    nearest = np.abs(elevation[:, None] - table[None, :]).argmin(axis=1)
    assert np.array_equal(nearest, p['ring'])         # ring = index in the ascending table
    assert np.abs(elevation - table[p['ring']]).max() < 0.01
    assert set(np.unique(p['ring'])) == set(range(len(table)))    # every beam returns
    r = np.linalg.norm(xyz, axis=1)
    assert r.max() <= RANGE[name] + 0.2
    assert p['intensity'].max() <= 255.0 * model.intensity_scale


def test_intensity_scale_multiplies_the_intensity(cfg):
    os1 = replace(PRESETS['OS1-128'], azimuth_steps=128)
    scaled = SyntheticDrive(cfg, num_cameras=0, lidar=os1).lidar_frame(2.0)
    plain = SyntheticDrive(cfg, num_cameras=0,
                           lidar=replace(os1, intensity_scale=1.0)).lidar_frame(2.0)
    assert np.array_equal(scaled[['x', 'y', 'z', 'ring']], plain[['x', 'y', 'z', 'ring']])
    assert np.array_equal(scaled['intensity'], np.float32(8.0) * plain['intensity'])
    assert scaled['intensity'].max() > 255.0


def test_tables_are_checked_and_beams_override_a_table():
    model = LidarModel.from_table([-2.0, 0.5, 3.0], azimuth_steps=64)
    assert (model.beams, model.min_elevation_deg, model.max_elevation_deg) == (3, -2.0, 3.0)
    assert np.allclose(degrees(model), [-2.0, 0.5, 3.0])
    for bad, message in (({'beams': 4}, 'has 3 angles for 4 beams'),
                         ({'elevations_deg': (3.0, 0.5, -2.0)}, 'strictly ascending'),
                         ({'min_elevation_deg': -3.0}, "table's ends"),
                         ({'intensity_scale': 0.0}, 'intensity_scale')):
        with pytest.raises(ValueError, match=message):
            replace(model, **bad)
    with pytest.raises(ValueError, match='LidarModel'):
        LidarModel.from_table([1.0, float('nan')])
    with pytest.raises(ValueError, match='strictly ascending'):
        LidarModel.from_table([1.0, float('nan'), 2.0])
    even = PRESETS['HDL-64E'].uniform(5)
    assert even.elevations_deg is None
    assert np.allclose(degrees(even), np.linspace(-23.95, 2.81, 5))


def read(bag):
    with Reader(bag) as reader:
        return [(conn.topic, TS.deserialize_cdr(raw, conn.msgtype))
                for conn, _, raw in reader.messages()]


def test_sample_bag_lidar_preset_speed_and_instant_sweep(tmp_path, capsys):
    bag = tmp_path / 'vlp'
    assert main(['sample-bag', str(bag), '--lidar', 'vlp-16', '--azimuth-steps', '64',
                 '--seconds', '0.2', '--cameras', '0', '--speed', '20', '--instant-sweep']) == 0
    messages = read(bag)
    clouds = [np.frombuffer(m.data, POINT_DTYPE) for t, m in messages if t == POINTCLOUD_TOPIC]
    assert len(clouds) == 2
    for p in clouds:
        xyz = np.stack([p['x'], p['y'], p['z']], axis=-1).astype(np.float64)
        elevation = np.degrees(np.arcsin(xyz[:, 2] / np.linalg.norm(xyz, axis=1)))
        assert np.allclose(elevation, VLP_16[p['ring']], atol=0.01)
        assert np.all(p['time'] == 0.0)
        # 64 columns, each at -180 + 360 (c + 0.5) / 64 deg.
        columns = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0])) / (360.0 / 64) + 31.5
        assert np.allclose(columns, np.round(columns), atol=1e-3)
    odometry = [m for t, m in messages if t == ODOMETRY_TOPIC]
    assert [m.twist.twist.linear.x for m in odometry] == [20.0] * len(odometry)
    assert 'ego_speed 20.0, instant_sweep True' in capsys.readouterr().out

    # --beams spreads that many beams over the preset's field of view.
    assert main(['sample-bag', str(tmp_path / 'hdl'), '--lidar', 'HDL-64E', '--beams', '4',
                 '--azimuth-steps', '64', '--seconds', '0.1', '--cameras', '0']) == 0
    (p,) = [np.frombuffer(m.data, POINT_DTYPE) for t, m in read(tmp_path / 'hdl')
            if t == POINTCLOUD_TOPIC]
    xyz = np.stack([p['x'], p['y'], p['z']], axis=-1).astype(np.float64)
    elevation = np.degrees(np.arcsin(xyz[:, 2] / np.linalg.norm(xyz, axis=1)))
    assert np.allclose(elevation, np.linspace(-23.95, 2.81, 4)[p['ring']], atol=0.01)


@pytest.mark.parametrize('argv, message', [
    (['--lidar', 'HDL-65'], "no LiDAR preset 'HDL-65'; the presets are VLP-16, HDL-32E, "
                            'HDL-64E, OS1-128, Pandar64'),
    (['--speed', '30'], '--speed must be a number > 0 and <= 25 m/s, got 30'),
    (['--speed', '0'], '--speed must be a number > 0 and <= 25 m/s, got 0'),
    (['--speed', 'nan'], '--speed must be a number > 0 and <= 25 m/s, got nan'),
    (['--lidars', 'two'], "argument --lidars: invalid choice: 'two'"),
    (['--lidar', 'VLP-16', '--beams', '0'], 'need beams in 1..256'),
])
def test_sample_bag_refuses_a_bad_preset_or_speed_in_one_line(argv, message, tmp_path, capsys):
    assert main(['sample-bag', str(tmp_path / 'bag'), *argv]) == 1
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and message in err and 'Traceback' not in err
    assert not (tmp_path / 'bag').exists()
