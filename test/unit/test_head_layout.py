"""A head checkpoint must fit the BEV's channels: refused at load, by channels (issue 29)."""

from dataclasses import replace
import re

from cli_errors import assert_one_line_error
from configs import PARAMS_FILE, small_params
import jax
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.detection.head import (CHANNELS_KEY, describe_channels,
                                                FEATURE_MAP_ENCODER, HeadInput, load_head,
                                                save_weights)
from jax_perception_node.detection.heads import centerpoint
from jax_perception_node.detection.heads.centerpoint import object_head, WEIGHTS
from jax_perception_node.settings.channels import COVERAGE_CHANNEL, lidar_channels
from jax_perception_node.settings.config import config_from_parameters, load_config
from jax_perception_node.settings.param_file import read_param_file
from jax_perception_node.settings.parameters import ConfigError, REFERENCE_HEAD
import numpy as np
import pytest
import toy_heads

SHIPPED = lidar_channels(1) + tuple(f'camera_{k}' for k in range(8)) + (COVERAGE_CHANNEL,)
SHIPPED_TEXT = ('15 BEV channels (occupancy, density, z_max, z_mean, z_min, intensity_mean, '
                'camera_0 .. camera_7, coverage)')
LIDAR_ONLY = lidar_channels(1) + (COVERAGE_CHANNEL,)
SHAPE_WORDING = ('float32[', 'the head needs', 'centerpoint_objects.npz', 'shape')


def bev(names: tuple[str, ...] = (), channels: int | None = None) -> HeadInput:
    """Return a 16 x 24 BEV of ``names`` (or of ``channels`` unnamed ones)."""
    return HeadInput(16, 24, len(names) if channels is None else channels, 0.4, names)


def refused(call) -> str:
    """Call it, expecting ConfigError of one line; return its text."""
    with pytest.raises(ConfigError) as caught:
        call()
    text = str(caught.value)
    assert '\n' not in text
    return text


def assert_shipped_refusal(text: str, has: str) -> None:
    """Check the issue's line: head.module, both layouts, what to do; no shipped file's shape."""
    assert text.startswith(f'head.module: {REFERENCE_HEAD} ships weights trained for '
                           f'{SHIPPED_TEXT}, this configuration has {has}'), text
    assert "set head.module: '' for no head" in text and 'jax-perception train' in text
    assert not any(words in text for words in SHAPE_WORDING), text


@pytest.fixture
def no_lidar_weights(tmp_path, monkeypatch):
    """Make the head ship no LiDAR-only checkpoint (as before one was trained)."""
    monkeypatch.setattr(centerpoint, 'LIDAR_WEIGHTS', tmp_path / 'absent' / 'lidar.npz')


@pytest.fixture
def lidar_weights(tmp_path, monkeypatch):
    """Make the head ship a LiDAR-only checkpoint (untrained, its channels recorded)."""
    (tmp_path / 'shipped').mkdir()
    path = trained_for(tmp_path / 'shipped', LIDAR_ONLY)
    monkeypatch.setattr(centerpoint, 'LIDAR_WEIGHTS', path)
    return path


def test_the_shipped_weights_record_the_shipped_configurations_channels():
    cfg = load_config(PARAMS_FILE)
    names = lidar_channels(cfg.accumulation.num_sweeps) + cfg.camera_channel_names + (
        COVERAGE_CHANNEL,)
    assert tuple(np.load(WEIGHTS)[CHANNELS_KEY]) == names == SHIPPED
    head = load_head(REFERENCE_HEAD, '', bev(SHIPPED))              # by name
    assert head.weights_path == WEIGHTS
    assert load_head(REFERENCE_HEAD, '', bev(channels=15)).weights_path == WEIGHTS   # by count


def test_the_shipped_lidar_only_weights_record_the_lidar_only_channels():
    if not centerpoint.LIDAR_WEIGHTS.exists():
        pytest.skip(f'{centerpoint.LIDAR_WEIGHTS.name} is not trained yet')
    cfg = config_from_parameters({**{key: value for key, value in read_param_file(
        PARAMS_FILE).items() if not key.startswith('cameras.') or key.count('.') == 1},
        'cameras.names': []})
    assert lidar_channels(cfg.accumulation.num_sweeps) + (COVERAGE_CHANNEL,) == LIDAR_ONLY
    assert tuple(np.load(centerpoint.LIDAR_WEIGHTS)[CHANNELS_KEY]) == LIDAR_ONLY
    pipe = BevPipeline(cfg)
    assert pipe.head.weights_path == centerpoint.LIDAR_WEIGHTS
    assert pipe.head.params.mean.shape == (7,) and np.abs(pipe.head.params.mean).sum() > 0


def test_the_factory_takes_the_checkpoint_of_the_bevs_layout(lidar_weights):
    # Issue 29: one checkpoint per layout the shipped parameters make, taken by its channels.
    head_module = {'head.module': REFERENCE_HEAD}
    pipe = BevPipeline(config_from_parameters(small_params(0, **head_module)))   # names: []
    assert pipe.head.weights_path == lidar_weights and pipe.head.params.mean.shape == (7,)
    assert load_head(REFERENCE_HEAD, '', bev(channels=7)).weights_path == lidar_weights
    assert load_head(REFERENCE_HEAD, '', bev(SHIPPED)).weights_path == WEIGHTS
    # A live swap to '' takes the one of the BEV's layout; an explicit file is used as set.
    explicit = trained_for(lidar_weights.parent.parent, LIDAR_ONLY, record=False)
    head = load_head(REFERENCE_HEAD, str(explicit), bev(LIDAR_ONLY))
    assert head.weights_path == explicit and head.checkpoint('')[0] == lidar_weights
    # Any other layout: the one line, naming the shipped layout with the cameras.
    assert_shipped_refusal(refused(lambda: BevPipeline(config_from_parameters(
        small_params(2, **head_module)))), '10 BEV channels')


def test_the_feature_map_weights_serve_no_image_encoder_but_the_one_of_those_maps():
    # The shipped weights of the camera layout were trained on the sample drive's feature maps:
    # the appearance encoder computes them from its images; a user's encoder of 8 channels
    # (named as the shipped ones) computes other features, and was given them without a word.
    shipped = bev(SHIPPED)
    for encoder in ('', FEATURE_MAP_ENCODER):
        assert load_head(REFERENCE_HEAD, '', shipped._replace(encoder=encoder)).weights_path \
            == WEIGHTS
    text = refused(lambda: load_head(REFERENCE_HEAD, '', shipped._replace(
        encoder='my_encoders.resnet:features')))
    assert text.startswith(f'head.module: {REFERENCE_HEAD} ships weights trained with the image '
                           f'encoder {FEATURE_MAP_ENCODER} (feature maps), this configuration '
                           'has my_encoders.resnet:features; '), text
    assert 'jax-perception train' in text


def test_a_damaged_lidar_only_checkpoint_is_no_candidate(tmp_path, monkeypatch):
    damaged = tmp_path / 'lidar.npz'
    damaged.write_bytes(b'PK\x03\x04 not a zip')
    monkeypatch.setattr(centerpoint, 'LIDAR_WEIGHTS', damaged)
    assert_shipped_refusal(refused(lambda: load_head(REFERENCE_HEAD, '', bev(LIDAR_ONLY))),
                           f'{describe_channels(7, LIDAR_ONLY)};')


@pytest.mark.parametrize('cameras, has, shipped', [
    (0, '7 BEV channels', False),
    (2, '10 BEV channels', False),
    (2, '10 BEV channels', True),       # with a LiDAR-only checkpoint too: the same line
])
def test_a_configuration_the_shipped_weights_do_not_fit_is_refused_naming_head_module(
        cameras, has, shipped, request):
    request.getfixturevalue('lidar_weights' if shipped else 'no_lidar_weights')
    cfg = config_from_parameters(small_params(cameras, **{'head.module': REFERENCE_HEAD}))
    assert cfg.head.weights == ''
    assert_shipped_refusal(refused(lambda: BevPipeline(cfg)), has)


def test_weights_trained_on_another_cell_size_are_refused_naming_grid_resolution(tmp_path):
    """Objects span other numbers of cells: at 0.2 m the shipped head's car AP at 1 m fell."""
    at_half = HeadInput(16, 24, len(SHIPPED), 0.5, SHIPPED)
    text = refused(lambda: load_head(REFERENCE_HEAD, '', at_half))
    assert text == (f'head.module: {REFERENCE_HEAD} ships weights trained on a grid of 0.4 m '
                    'cells, this configuration has grid.resolution 0.5 m (its objects span other '
                    'numbers of cells); set grid.resolution: 0.4, or train weights on this grid '
                    '(jax-perception train)')
    for recorded in ('centerpoint_objects_lidar.npz', 'centerpoint_objects_cnn.npz'):
        assert float(np.load(WEIGHTS.with_name(recorded))['grid_resolution']) == 0.4
    # A file of the user's: named, with the cell size it records; none recorded: not checked.
    spec = object_head(bev(SHIPPED))
    save_weights(tmp_path / 'fine.npz', spec.params, SHIPPED, resolution=0.2)
    text = refused(lambda: load_head(REFERENCE_HEAD, str(tmp_path / 'fine.npz'), at_half))
    assert text.startswith(f'head.weights: {tmp_path / "fine.npz"} holds weights trained on a '
                           'grid of 0.2 m cells, this configuration has grid.resolution 0.5 m')
    save_weights(tmp_path / 'unsaid.npz', spec.params, SHIPPED)
    assert load_head(REFERENCE_HEAD, str(tmp_path / 'unsaid.npz'), at_half).weights_path == (
        tmp_path / 'unsaid.npz')
    # A record that is no cell size: one line too, not a traceback.
    with np.load(tmp_path / 'unsaid.npz') as arrays:
        np.savez(tmp_path / 'odd.npz', **arrays, grid_resolution=np.array('ab'))
    text = refused(lambda: load_head(REFERENCE_HEAD, str(tmp_path / 'odd.npz'), at_half))
    assert text.startswith(f'head.weights: {tmp_path / "odd.npz"} holds weights whose '
                           'grid_resolution is <U2[] '), text
    from jax_perception_node.detection.plugin import recorded_resolution    # head_layouts'
    assert recorded_resolution(WEIGHTS) == 0.4
    assert recorded_resolution(tmp_path / 'unsaid.npz') == 0.0
    assert refused(lambda: recorded_resolution(tmp_path / 'odd.npz')).startswith(
        f'{tmp_path / "odd.npz"} holds weights whose grid_resolution is <U2[] ')


def test_a_grid_the_head_cannot_pool_is_its_own_line_naming_the_grid():
    # The factory's ConfigError was wrapped as 'head.module: ... failed: ConfigError: ...'.
    text = refused(lambda: load_head(REFERENCE_HEAD, '', HeadInput(255, 256, 15, 0.4)))
    assert text == ('head.module: the CenterPoint head needs a grid of rows and columns '
                    'divisible by 4, got 255 x 256 (set grid.x_min, x_max, y_min, y_max and '
                    'resolution so)')


def test_a_projected_bev_of_the_weights_channel_count_is_refused_by_name(
        lidar_weights, tmp_path):
    """A fusion projection's outputs are feature_0 ..., not the LiDAR channels the head reads."""
    projection = tmp_path / 'reversed.npz'
    np.savez(projection, W=np.eye(7, dtype=np.float32)[::-1], b=np.zeros(7, np.float32))
    cfg = config_from_parameters(small_params(0, **{
        'head.module': REFERENCE_HEAD, 'fusion.weights_file': str(projection)}))
    text = refused(lambda: BevPipeline(cfg))
    assert text.startswith(f'head.module: {REFERENCE_HEAD} ships weights trained for '
                           f'{describe_channels(7, LIDAR_ONLY)}, this configuration has '
                           f'{describe_channels(7, tuple(f"feature_{k}" for k in range(7)))}'
                           ), text


def test_other_channels_of_the_lidar_only_count_are_refused_by_name(lidar_weights):
    names = LIDAR_ONLY[:5] + ('reflectivity', COVERAGE_CHANNEL)
    text = refused(lambda: load_head(REFERENCE_HEAD, '', bev(names)))
    assert text.startswith(f'head.module: {REFERENCE_HEAD} ships weights trained for '
                           f'{describe_channels(7, LIDAR_ONLY)}, this configuration has '
                           f'{describe_channels(7, names)} (channel 5 is intensity_mean in the '
                           'weights, reflectivity here); '), text


@pytest.mark.parametrize('names, where', [
    (LIDAR_ONLY, ''),
    # The same count, other channels: 2 sweeps add time_lag_mean, 7 camera channels.
    (lidar_channels(2) + tuple(f'camera_{k}' for k in range(7)) + (COVERAGE_CHANNEL,),
     ' (channel 6 is camera_0 in the weights, time_lag_mean here)'),
    (lidar_channels(1) + tuple(f'semantic_{k}' for k in range(8)) + (COVERAGE_CHANNEL,),
     ' (channel 6 is camera_0 in the weights, semantic_0 here)'),
])
def test_the_shipped_weights_are_refused_by_name(names, where, no_lidar_weights):
    text = refused(lambda: load_head(REFERENCE_HEAD, '', bev(names)))
    assert_shipped_refusal(text, f'{describe_channels(len(names), names)}{where};')


def trained_for(tmp_path, names, channels=None, record=True):
    """Write untrained reference weights for a BEV of ``names``; return the file."""
    spec = object_head(bev(names, channels))
    stem = f'w{len(names) if channels is None else channels}'
    path = tmp_path / (f'{stem}.npz' if record else f'{stem}_bare.npz')
    save_weights(path, jax.tree.map(np.asarray, spec.params), names if record else ())
    return path


@pytest.mark.parametrize('record', [True, False])
def test_a_head_weights_file_trained_for_other_channels_is_refused_naming_it(tmp_path, record):
    path = trained_for(tmp_path, SHIPPED, record=record)
    trained = SHIPPED_TEXT if record else '15 BEV channels'
    message = (f'head.weights: {path} holds weights trained for {trained}, this configuration '
               f'has {describe_channels(7, LIDAR_ONLY)}; set head.weights to weights trained '
               "for these channels (jax-perception train), or head.module: '' for no head")
    assert refused(lambda: load_head(REFERENCE_HEAD, str(path), bev(LIDAR_ONLY))) == message
    # A live swap to it is refused the same way, and the head keeps what it had.
    head = load_head(REFERENCE_HEAD, str(trained_for(tmp_path, LIDAR_ONLY)), bev(LIDAR_ONLY))
    assert refused(lambda: head.checkpoint(str(path))) == message
    assert head.params.mean.shape == (7,)
    target, params = head.checkpoint(str(head.weights_path))
    assert target == head.weights_path and params.mean.shape == (7,)


def test_weights_trained_for_many_more_channels_are_refused_by_their_layout(tmp_path):
    # Their first layer is larger than this head's by more than the .npy slack: the file was
    # refused by that array's size in bytes, naming neither layout nor what to do.
    wide = tuple(f'feature_{k}' for k in range(40))
    path = trained_for(tmp_path, wide)
    assert refused(lambda: load_head(REFERENCE_HEAD, str(path), bev(SHIPPED))) == (
        f'head.weights: {path} holds weights trained for {describe_channels(40, wide)}, this '
        f'configuration has {SHIPPED_TEXT}; set head.weights to weights trained for these '
        "channels (jax-perception train), or head.module: '' for no head")


def test_a_cell_size_recorded_without_channel_names_is_still_checked(tmp_path):
    # A head without checkpoint_channels and a file without names: the count is unknown, and
    # the check returned before the cell size was looked at.
    params = toy_heads.occupancy_head(bev(SHIPPED)).params
    save_weights(tmp_path / 'bare.npz', jax.tree.map(np.asarray, params), resolution=0.2)
    text = refused(lambda: load_head('toy_heads:occupancy_head', str(tmp_path / 'bare.npz'),
                                     bev(SHIPPED)))
    assert text.startswith(f'head.weights: {tmp_path / "bare.npz"} holds weights trained on a '
                           'grid of 0.2 m cells, this configuration has grid.resolution 0.4 m')


def test_a_live_swap_to_the_shipped_weights_that_do_not_fit_names_head_module(
        tmp_path, no_lidar_weights):
    head = load_head(REFERENCE_HEAD, str(trained_for(tmp_path, LIDAR_ONLY)), bev(LIDAR_ONLY))
    assert_shipped_refusal(refused(lambda: head.checkpoint('')),
                           f'{describe_channels(7, LIDAR_ONLY)};')


def test_a_file_without_names_is_compared_by_count_only(tmp_path):
    renamed = lidar_channels(1) + tuple(f'semantic_{k}' for k in range(8)) + (COVERAGE_CHANNEL,)
    path = trained_for(tmp_path, SHIPPED, record=False)
    assert load_head(REFERENCE_HEAD, str(path), bev(renamed)).weights_path == path
    recorded = trained_for(tmp_path, SHIPPED)
    assert 'channel 6 is camera_0 in the weights, semantic_0 here' in refused(
        lambda: load_head(REFERENCE_HEAD, str(recorded), bev(renamed)))


@pytest.mark.parametrize('value', [np.zeros(15, np.float32), np.asarray([SHIPPED, SHIPPED])])
def test_a_channel_record_that_is_no_list_of_names_is_refused(tmp_path, value):
    spec = object_head(bev(SHIPPED))
    path = tmp_path / 'w.npz'
    save_weights(path, jax.tree.map(np.asarray, spec.params))
    arrays = dict(np.load(path))
    np.savez(path, **arrays, **{CHANNELS_KEY: value})
    assert re.match(rf'^head.weights: {re.escape(str(path))} {CHANNELS_KEY} is '
                    rf'{value.dtype}\[.*\], not a list of BEV channel names$',
                    refused(lambda: load_head(REFERENCE_HEAD, str(path), bev(SHIPPED))))


def shipped_toy_head(tmp_path):
    """Write weights of another layout for a toy head that says neither names nor counts."""
    path = tmp_path / 'toy.npz'
    save_weights(path, {'scale': np.ones(3, np.float32), 'bias': np.float32(-3.0),
                        'z': np.float32(0.75)})
    return path


def test_another_heads_shipped_weights_of_other_shapes_name_head_module(tmp_path, monkeypatch):
    path = shipped_toy_head(tmp_path)
    monkeypatch.setattr(toy_heads, 'shipped_head', lambda head_input: replace(
        toy_heads.occupancy_head(head_input), weights=path), raising=False)
    text = refused(lambda: load_head('toy_heads:shipped_head', '', bev(LIDAR_ONLY)))
    assert text == (
        f'head.module: toy_heads:shipped_head ships weights that do not fit this configuration, '
        f"{describe_channels(7, LIDAR_ONLY)}: their ['scale'] has shape [3], the head builds "
        "[]; set head.module: '' for no head, or train weights for these channels and set "
        'head.weights to them')     # not "jax-perception train": it trains the reference head


def test_weights_a_head_ships_that_cannot_be_read_name_head_module(tmp_path, monkeypatch):
    """An installed plug-in missing its package data: head.weights was never set."""
    missing = tmp_path / 'not_installed.npz'
    monkeypatch.setattr(toy_heads, 'shipped_head', lambda head_input: replace(
        toy_heads.occupancy_head(head_input), weights=missing), raising=False)
    text = refused(lambda: load_head('toy_heads:shipped_head', '', bev(LIDAR_ONLY)))
    assert text.startswith(f'head.module: cannot read {missing}'), text


def test_channel_lists_are_short():
    assert describe_channels(3) == '3 BEV channels'
    assert describe_channels(4, ('a_1', 'a_2', 'b', 'c_0')) == '4 BEV channels (a_1, a_2, b, c_0)'
    names = tuple(f'feature_{k}' for k in range(64)) + ('x_3', 'x_5', 'x_6', 'x_7')
    assert describe_channels(68, names) == ('68 BEV channels (feature_0 .. feature_63, x_3, '
                                            'x_5 .. x_7)')
    many = tuple(f'n{k}x' for k in range(20))
    assert describe_channels(20, many).endswith('n11x, ...)')


@pytest.fixture(scope='module')
def tiny_bag(tmp_path_factory):
    from jax_perception_node.tools.cli import main
    bag = tmp_path_factory.mktemp('bags') / 'drive'
    assert main(['sample-bag', str(bag), '--seconds', '0.3', '--seed', '3']) == 0
    return bag


def test_replay_prints_the_one_line(tiny_bag, tmp_path, capsys, no_lidar_weights):
    from jax_perception_node.tools.cli import main
    from ros_harness import write_params
    params = {key: value for key, value in read_param_file(PARAMS_FILE).items()
              if not key.startswith('cameras.') or key.count('.') == 1}   # no camera blocks
    assert params['head.module'] == REFERENCE_HEAD and params['head.weights'] == ''
    params['cameras.names'] = []
    write_params(params, tmp_path / 'lidar_only.yaml')
    capsys.readouterr()
    assert main(['replay', str(tiny_bag), '--out', str(tmp_path / 'o'),
                 '--params', str(tmp_path / 'lidar_only.yaml')]) == 1
    assert_one_line_error(capsys, f'head.module: {REFERENCE_HEAD} ships weights trained for '
                                  f'{SHIPPED_TEXT}, this configuration has 7 BEV channels')
    assert not (tmp_path / 'o').exists()
