"""Cameras with images: the encoder plug-in, the shipped encoders, and the BEV they give."""

from configs import camera_params, small_config
import jax
from jax_perception_node import BevPipeline
from jax_perception_node.core.compile_counter import compile_count
from jax_perception_node.detection.encoder import EncoderInput, load_encoder
from jax_perception_node.detection.encoders.pooled import APPEARANCE_CHANNELS
from jax_perception_node.detection.plugin import save_weights
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from reference import block_mean, lift_ref
from test_pipeline import cell_centre_cloud
from toy_encoders import gained_ref, standardised_ref

RGB = 'jax_perception_node.detection.encoders.pooled:rgb'
APPEARANCE = 'jax_perception_node.detection.encoders.pooled:appearance'
TOY = 'toy_encoders:gained'


def image_config(module=RGB, stride=4, channels=3, **overrides):
    """Return the small test config with both cameras sending images to ``module``."""
    cams = {**camera_params('front', channels=channels),
            **camera_params('rear', channels=channels, translation=(-1.0, 0.0, 1.5),
                            rotation=[-0.5, -0.5, 0.5, 0.5])}
    return small_config(**{**cams, 'cameras.front.input': 'image', 'cameras.rear.input': 'image',
                           'encoder.module': module, 'encoder.stride': stride, **overrides})


def appearance_ref(rgb: np.ndarray) -> np.ndarray:
    """NumPy, pixel by pixel: the eight appearance channels of an RGB map in 0..1."""
    h, w, _ = rgb.shape
    lum = rgb @ np.array([0.299, 0.587, 0.114])

    def at(i, j):
        return lum[min(max(i, 0), h - 1), min(max(j, 0), w - 1)]
    out = np.zeros((h, w, 8))
    for i in range(h):
        for j in range(w):
            gu = sum(k * (at(i + di, j + 1) - at(i + di, j - 1))
                     for di, k in ((-1, 1), (0, 2), (1, 1))) / 8
            gv = sum(k * (at(i + 1, j + dj) - at(i - 1, j + dj))
                     for dj, k in ((-1, 1), (0, 2), (1, 1))) / 8
            box = np.mean([at(i + di, j + dj) for di in range(-2, 3) for dj in range(-2, 3)])
            r, g, b = rgb[i, j]
            out[i, j] = [r, g, b, lum[i, j], gu, gv, lum[i, j] - box, max(r, g, b) - min(r, g, b)]
    return out


@pytest.fixture(scope='module')
def rgb_pipe():
    pipe = BevPipeline(image_config())
    pipe.warmup()
    return pipe


def random_images(cfg, seed=0):
    rng = np.random.default_rng(seed)
    return {c.name: rng.integers(0, 256, size=cfg.image_shape, dtype=np.uint8)
            for c in cfg.cameras}


def test_the_rgb_encoders_bev_equals_the_reference_across_calibrations(rgb_pipe):
    """Pooled RGB, lifted: the NumPy reference within 1e-4, before and after a move; 0 compiles."""
    cfg = rgb_pipe.cfg
    assert cfg.image_shape == (48, 80, 3) and rgb_pipe.encoder is not None
    rng = np.random.default_rng(3)
    images = random_images(cfg, 1)
    points = cell_centre_cloud(cfg, rng)
    pooled = {name: block_mean(image, 4) for name, image in images.items()}
    before = compile_count()
    out = rgb_pipe.process(points, images).features
    camera, coverage = lift_ref(cfg, pooled)
    assert 0 < coverage.sum() < coverage.size
    assert np.abs(out[..., 6:9] - camera).max() <= 1e-4
    np.testing.assert_array_equal(out[..., 9], coverage)
    # New intrinsics and pose, as a CameraInfo or TF would set them: no compile.
    moved = image_config(**camera_params('front', fx=6.0, cx=10.0, translation=(0.5, 0.3, 2.0)))
    rgb_pipe.set_calibration(cameras=moved.cameras)
    try:
        out = rgb_pipe.process(points, images).features
    finally:
        rgb_pipe.set_calibration(cameras=cfg.cameras)
    moved_camera, _ = lift_ref(moved, pooled)
    assert not np.allclose(moved_camera, camera, atol=1e-3)
    assert np.abs(out[..., 6:9] - moved_camera).max() <= 1e-4
    # A masked camera drops out of the mean.
    out = rgb_pipe.process(points, {'front': images['front']}).features
    front_only, _ = lift_ref(cfg, pooled, used={'front'})
    assert np.abs(out[..., 6:9] - front_only).max() <= 1e-4
    assert compile_count() == before


def test_an_image_that_is_not_uint8_is_refused_naming_its_camera(rgb_pipe):
    # A 16-bit image copied into the uint8 batch wrapped to its low byte (mostly 0), silently.
    cfg = rgb_pipe.cfg
    images = random_images(cfg)
    name = cfg.cameras[0].name
    images[name] = images[name].astype(np.uint16) << 8
    with pytest.raises(ValueError, match=f"camera '{name}': an image of uint16, expected uint8"):
        rgb_pipe.process(np.zeros((4, 4), np.float32), images)


def test_the_appearance_encoder_equals_a_pixel_by_pixel_reference():
    """The eight hand-made channels of the pooled image; channel k is channel k % 8."""
    assert APPEARANCE_CHANNELS == ('red', 'green', 'blue', 'luminance', 'grad_u', 'grad_v',
                                   'local_contrast', 'saturation')
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, size=(24, 40, 3), dtype=np.uint8)
    for channels in (8, 3, 11):
        enc = load_encoder(APPEARANCE, '', EncoderInput(24, 40, 2, 12, 20, channels))
        out = np.asarray(jax.jit(enc.spec.apply)(enc.params, image))
        want = appearance_ref(block_mean(image, 2))[..., np.arange(channels) % 8]
        assert out.shape == (12, 20, channels) and out.dtype == np.float32
        assert np.abs(out - want).max() <= 1e-5


def test_encoder_weights_are_traced_a_live_swap_compiles_nothing(tmp_path):
    """A checkpoint of the same shapes swaps in for the next frame: its values, 0 compiles."""
    cfg = image_config(TOY, stride=2)
    pipe = BevPipeline(cfg)
    pipe.warmup()
    images = random_images(cfg, 2)
    points = np.zeros((5, 4), np.float32)
    gain, bias = np.float32([0.5, 2.0, -1.0]), np.float32([1.0, 0.0, 3.0])
    path = tmp_path / 'encoder.npz'
    save_weights(path, {'bias': bias, 'gain': gain})
    before = compile_count()
    first = pipe.process(points, images).features
    pipe.set_encoder_weights(str(path))
    second = pipe.process(points, images).features
    assert compile_count() == before and pipe.encoder_weights == path
    maps = {n: gained_ref(im, 2, gain, bias) for n, im in images.items()}
    np.testing.assert_allclose(second[..., 6:9], lift_ref(cfg, maps)[0], atol=1e-3)
    plain = {n: gained_ref(im, 2, 1.0, 0.0) for n, im in images.items()}
    np.testing.assert_allclose(first[..., 6:9], lift_ref(cfg, plain)[0], atol=1e-3)
    # A file of other shapes is refused naming encoder.weights; the weights in force stay.
    save_weights(tmp_path / 'bad.npz', {'bias': bias, 'gain': np.ones(4, np.float32)})
    with pytest.raises(ConfigError, match=r"^encoder\.weights: .*bad\.npz \['gain'\] is "
                                          r'float32\[4\], the encoder needs float32\[3\]'):
        pipe.set_encoder_weights(str(tmp_path / 'bad.npz'))
    np.testing.assert_array_equal(pipe.process(points, images).features, second)


@pytest.mark.parametrize('overrides,message', [
    ({'cameras.rear.input': 'features'},
     r'^cameras\.rear\.input: features, but cameras\.front\.input is image; every camera '),
    ({'encoder.module': ''}, r'^cameras\.front\.input: image needs an image encoder: set '
                             r'encoder\.module'),
    ({'encoder.stride': 64, 'cameras.front.width': 200, 'cameras.rear.width': 200},
     r'^encoder\.stride: 64 x the 12 x 200 feature map is a 768 x 12800 image, above 8192'),
])
def test_image_configurations_that_cannot_work_are_refused_by_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        image_config(**overrides)


def test_an_encoder_without_images_is_refused():
    with pytest.raises(ConfigError, match=r'^encoder\.module: .*pooled:rgb given, but no camera '
                                          r'has input: image'):
        small_config(**{'encoder.module': RGB})
    with pytest.raises(ConfigError, match=r'^encoder\.weights: w\.npz given, but no camera'):
        small_config(**{'encoder.weights': 'w.npz'})


@pytest.mark.parametrize('module,channels,message', [
    (RGB, 8, r'^encoder\.module: .*pooled:rgb failed: ValueError: it gives 3 channels \(red, '
             r'green, blue\), the cameras have 8: set cameras\.<name>\.channels: 3'),
    ('toy_encoders:nothing', 3, r'^encoder\.module: toy_encoders has no callable nothing'),
    ('no_such_package.encoders:x', 3, r'^encoder\.module: cannot import no_such_package'),
    ('not a module', 3, r"^encoder\.module: expected 'package\.module:factory'"),
    # A plug-in exiting the process (argparse on the node's argv): one line all the same.
    ('toy_encoders:argparse_factory', 3, r'^encoder\.module: toy_encoders:argparse_factory '
                                         r'failed: SystemExit: 2$'),
    ('toy_encoders:exiting_apply', 3, r'^encoder\.module: toy_encoders:exiting_apply cannot run '
                                      r'on a \d+ x \d+ RGB image: SystemExit: 3$'),
])
def test_encoders_that_cannot_load_are_refused_naming_encoder_module(module, channels, message):
    with pytest.raises(ConfigError, match=message):
        BevPipeline(image_config(module, channels=channels))


def test_an_encoders_non_finite_values_are_zeroed_before_the_lift():
    """A black image standardised per image is 0 / 0: the BEV stays finite, as with maps."""
    cfg = image_config('toy_encoders:standardised', stride=2)
    pipe = BevPipeline(cfg)
    pipe.warmup()
    images = random_images(cfg, 3)
    images['front'] = np.zeros(cfg.image_shape, np.uint8)      # a lens cap, the night
    features = pipe.process(np.zeros((5, 4), np.float32), images).features
    assert np.isfinite(features).all()
    maps = {n: standardised_ref(im, 2) for n, im in images.items()}
    assert not maps['front'].any()
    np.testing.assert_allclose(features[..., 6:9], lift_ref(cfg, maps)[0], atol=1e-4)


def test_an_encoder_the_frame_cannot_map_over_its_cameras_is_refused_at_load():
    """The frame maps apply over the cameras: a host callback without a vmap rule can't run."""
    with pytest.raises(ConfigError, match=r'^encoder\.module: toy_encoders:host_backbone cannot '
                                          r'run on a 24 x 40 RGB image: NotImplementedError'):
        load_encoder('toy_encoders:host_backbone', '', EncoderInput(24, 40, 2, 12, 20, 3))


def test_an_encoder_of_the_wrong_output_shape_is_refused():
    """The lift's maps are fixed: an encoder whose output differs is refused before warm-up."""
    with pytest.raises(ConfigError, match=r'^encoder\.module: .* turns a 24 x 40 image into '
                                          r'float32\[6, 10, 3\], the cameras need float32'
                                          r'\[12, 20, 3\]'):
        load_encoder(RGB, '', EncoderInput(24, 40, 4, 12, 20, 3))


def test_an_images_other_transport_copy_is_skipped_undecoded(rgb_pipe):
    """
    image_transport publishes each image raw and compressed, and the node takes both.

    The copy of a stamp already buffered is not decoded and, arriving after the next image,
    is no stamp going back (which would clear the camera's buffer); an older stamp that is not
    buffered still is one.
    """
    import io
    from types import SimpleNamespace
    from PIL import Image as PilImage
    from jax_perception_node.frames.frame_path import FramePath
    path = FramePath(rgb_pipe.cfg, rgb_pipe)
    height, width, _ = rgb_pipe.cfg.image_shape
    rgb = np.random.default_rng(4).integers(0, 256, (height, width, 3), dtype=np.uint8)
    jpeg = io.BytesIO()
    PilImage.fromarray(rgb).save(jpeg, 'JPEG', quality=90)

    def message(stamp, raw):
        head = SimpleNamespace(stamp=SimpleNamespace(sec=stamp, nanosec=0),
                               frame_id='front_optical')
        if raw:
            return SimpleNamespace(header=head, encoding='rgb8', height=height, width=width,
                                   is_bigendian=0, step=width * 3, data=rgb.tobytes())
        return SimpleNamespace(header=head, format='jpeg', data=jpeg.getvalue())
    decoded = []
    decode = path._images.decode
    path._images.decode = lambda msg: decoded.append(msg.header.stamp.sec) or decode(msg)
    assert path.add_features('front', message(100, raw=True)) is False
    assert path.add_features('front', message(100, raw=False)) is False     # its copy
    assert path.add_features('front', message(101, raw=True)) is False
    assert path.add_features('front', message(100, raw=False)) is False     # late copy
    assert decoded == [100, 101]
    assert path.sync.holds('front', 100 * 10**9) and path.sync.holds('front', 101 * 10**9)
    assert path.add_features('front', message(99, raw=False)) is True       # went back
    assert decoded == [100, 101, 99] and not path.sync.holds('front', 100 * 10**9)


def test_weights_an_encoder_ships_that_cannot_be_read_name_encoder_module(tmp_path, monkeypatch):
    """An installed plug-in missing its package data: encoder.weights was never set."""
    from dataclasses import replace
    import toy_encoders
    missing = tmp_path / 'not_installed.npz'
    monkeypatch.setattr(toy_encoders, 'shipping', lambda inp: replace(
        toy_encoders.gained(inp), weights=missing), raising=False)
    with pytest.raises(ConfigError, match=f'^encoder.module: cannot read {missing}'):
        load_encoder('toy_encoders:shipping', '', EncoderInput(24, 40, 4, 6, 10, 3))


def test_an_encoder_failing_as_it_runs_costs_its_frame_only_with_accumulation(monkeypatch):
    """Found by an independent review: the failed frame's sweep ring went to every later one."""
    from dataclasses import replace
    import jax.numpy as jnp
    import toy_encoders
    fail = {'now': False}

    def check(total):
        if fail['now']:
            raise RuntimeError('my encoder cannot take this image')
        return total

    def failing(inp):
        spec = toy_encoders.gained(inp)

        def apply(params, image):
            total = jax.pure_callback(check, jax.ShapeDtypeStruct((), jnp.float32),
                                      image.sum(dtype=jnp.float32), vmap_method='sequential')
            return spec.apply(params, image) + 0.0 * total
        return replace(spec, apply=apply)
    monkeypatch.setattr(toy_encoders, 'failing', failing, raising=False)
    cfg = image_config('toy_encoders:failing', **{'accumulation.num_sweeps': 2})
    pipe = BevPipeline(cfg)
    pipe.warmup()
    images, points = random_images(cfg, 3), cell_centre_cloud(cfg, np.random.default_rng(5))

    def frame(k):
        return pipe.process(points, images, stamp_ns=k * 10**8, pose=np.eye(4))
    assert frame(1).sweeps_used == 1 and frame(2).sweeps_used == 2
    fail['now'] = True
    message = (r'^encoder\.module toy_encoders:failing: failed as it ran: RuntimeError: my '
               r'encoder cannot take this image$')
    with pytest.raises(ConfigError, match=message):
        frame(3)
    fail['now'] = False
    before = compile_count()
    assert frame(4).sweeps_used == 1        # the ring anew: its own sweep only
    assert frame(5).sweeps_used == 2 and compile_count() == before


def test_a_runtime_error_of_no_plug_in_callback_is_not_blamed_on_a_plug_in(rgb_pipe):
    from jax_perception_node.core.plugin_failure import plugin_failure
    assert rgb_pipe.plugins.startswith('encoder.module ')
    other = jax.errors.JaxRuntimeError('INTERNAL: something in XLA itself')
    assert plugin_failure(other, rgb_pipe) is None
    assert plugin_failure(ValueError('callback'), rgb_pipe) is None
