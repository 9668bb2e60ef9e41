"""The intensity-scale check (frames/intensity_scale.py) on the sample drive's LiDAR presets."""

from dataclasses import replace

from configs import small_config
from jax_perception_node.core.buckets import PaddedCloud
from jax_perception_node.frames.intensity_scale import (cloud_off_scale, off_scale, OffScale,
                                                        suggested_scale)
from jax_perception_node.settings.config import default_params_file, load_config
from jax_perception_node.tools.synthetic_drive import SyntheticDrive
from jax_perception_node.tools.synthetic_drive.lidar_presets import PRESETS
import numpy as np
import pytest

TOP = 255.0      # the reference head's scale (centerpoint.INTENSITY_TOP)


@pytest.fixture(scope='module')
def sweeps() -> dict[str, list[np.ndarray]]:
    """Return each LiDAR model's intensities at a sparse place and at a dense one."""
    cfg = load_config(default_params_file())
    models = {'default': None, **PRESETS}
    return {name: [SyntheticDrive(cfg, lidar=model).lidar_frame(t)['intensity']
                   if model else SyntheticDrive(cfg).lidar_frame(t)['intensity']
                   for t in (2.0, 8.0)] for name, model in models.items()}


def sample_p99(intensity: np.ndarray) -> float:
    """NumPy: the 99th percentile of the valid values among at most 2048 evenly strided rows."""
    sample = intensity[::int(np.ceil(len(intensity) / 2048))]
    assert len(sample) <= 2048
    return float(np.percentile(sample[np.abs(sample) <= 1e12], 99.0))


def test_0_255_lidars_read_on_the_scale(sweeps):
    for name in ('default', 'VLP-16', 'HDL-32E', 'HDL-64E', 'Pandar64'):
        for intensity in sweeps[name]:
            assert off_scale(intensity, TOP) is None, name
            assert 0.25 * TOP < sample_p99(intensity) < 0.6 * TOP     # where the check is sure


def test_an_ousters_signal_is_off_and_the_suggested_scale_brings_it_back(sweeps):
    for intensity in sweeps['OS1-128']:      # 8x the 0-255 scale, as the driver's signal
        p99 = off_scale(intensity, TOP)
        assert p99 == pytest.approx(sample_p99(intensity))
        assert p99 > 2 * TOP
        suggested = float(f'{0.5 * TOP / p99:.2g}')       # p99 to half the top
        assert 0.1 <= suggested <= 0.16      # the preset's exact factor is 0.125
        assert off_scale(intensity * np.float32(suggested), TOP) is None
        assert off_scale(intensity * np.float32(0.125), TOP) is None


def test_a_simulators_0_1_intensity_is_off(sweeps):
    intensity = sweeps['default'][1] / np.float32(255.0)
    p99 = off_scale(intensity, TOP)
    assert p99 == pytest.approx(sample_p99(intensity)) and p99 < TOP / 64
    assert off_scale(intensity * np.float32(255.0), TOP) is None


def test_nan_and_small_clouds():
    rng = np.random.default_rng(3)
    signal = rng.uniform(0.0, 2000.0, 10_000).astype(np.float32)
    assert off_scale(signal, TOP) is not None
    half = signal.copy()
    half[::3] = np.nan                         # judged on its finite values
    assert off_scale(half, TOP) == pytest.approx(sample_p99(half))
    assert off_scale(signal[:63], TOP) is None             # too few to judge
    garbage = signal / np.float32(8.0)           # on the scale, but 5 % of the points beyond
    garbage[::20] = 3e38                         # the validity limit: dropped, not judged
    assert off_scale(garbage, TOP) is None
    assert off_scale(np.full(10_000, np.nan, np.float32), TOP) is None
    assert off_scale(np.zeros(10_000, np.float32), TOP) == 0.0     # all dark: off (low)


def test_the_advice_names_the_parameter_and_the_scale():
    signal = OffScale('lidar', 1021.0, suggested_scale(1.0, 1021.0, TOP))
    assert signal.suggested == 0.12
    assert signal.advice() == ('99 % of them under 1021: set lidar.intensity_scale to about '
                               "0.12 (0.125 for an Ouster's signal, 255 for a 0-1 simulator)")
    assert suggested_scale(1.0, 0.5, TOP) == 260.0
    assert suggested_scale(4.0, 1e-12, TOP) == 1e6           # within the parameter's bounds
    dark = OffScale('lidars.top', 0.0, suggested_scale(1.0, 0.0, TOP))
    assert dark.advice() == ('99 % of them are 0 or below: check that lidars.top.intensity_field '
                             'names the field that carries the intensity')


def test_the_lidar_off_scale_is_named_among_several(sweeps):
    cfg = load_config(default_params_file())
    base = cfg.lidar_sensors[0]
    lidars = (replace(base, name='top'), replace(base, name='left', intensity_scale=2.0),
              replace(base, name='right'))
    good, signal = sweeps['default'][1][:3000], sweeps['OS1-128'][1][:2000]
    rows = np.zeros((8192, 4), np.float32)
    rows[:3000, 3], rows[3000:5000, 3] = good, signal
    rows[5000:6000, 3] = 0.0                  # right: no intensity field, read as 0
    padded = PaddedCloud(rows, 6000, 8192, 0, 6000, False, starts=(3000, 5000),
                         lidars=((3000, 3000, True, False), (2000, 2000, True, False),
                                 (1000, 1000, False, False)))
    off = cloud_off_scale(lidars, padded, TOP)
    assert off.key == 'lidars.left' and off.p99 == pytest.approx(sample_p99(signal))
    # The scale to set is from the one in force (2): the percentile read at 2 to half the top.
    assert off.suggested == float(f'{2.0 * 0.5 * TOP / off.p99:.2g}')
    assert cloud_off_scale(lidars, padded, 0.0) is None       # a head that declares no scale
    fine = replace(padded, lidars=padded.lidars[:1] + ((2000, 2000, False, False),)
                   + padded.lidars[2:])
    assert cloud_off_scale(lidars, fine, TOP) is None      # a cloud read as 0 is not judged
    one = PaddedCloud(rows[3000:], 2000, 4096, 0, 2000)
    assert cloud_off_scale(small_config(cameras=0).lidar_sensors, one, TOP).key == 'lidar'
