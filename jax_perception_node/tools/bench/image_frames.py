"""
Part 10: cameras that send images, side by side with feature maps and LiDAR alone.

Four frames at the headline cloud size, interleaved so machine noise hits them alike: LiDAR
only; the shipped four cameras as feature maps (32 x 88 x 8); the same cameras as JPEG images
at four times the map (352 x 128, ``sample-bag --camera-images jpeg``), decoded on the host
(``ImageDecoder``, scaled) and encoded on the device in the frame's executable, by the
``appearance`` encoder and by the learned one (``encoders.learned``, its shipped weights).
Each frame's camera inputs differ from the previous frame's (two drive times in turn), so
every one is staged and crosses to the device as in a drive. An image frame is timed from the
first JPEG's decode to the BEV on the host. Then each encoder alone, JAX against a PyTorch
peer on the same images and weights (outputs checked equal first), and the host decode rows of
``images.py``.
"""

import time
from typing import Callable

from jax_perception_node import BevPipeline
from jax_perception_node.core.compile_counter import compile_count
from jax_perception_node.detection.encoders import learned
from jax_perception_node.detection.encoders.pooled import LUMA
from jax_perception_node.sensors.camera_image import ImageDecoder
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools.synthetic_drive import SyntheticDrive
import numpy as np

from .common import bench_params, HEADLINE_POINTS, Inputs, Plan, rounded, RTOL, SWEEP_T0
from .images import decode_rows, image_message

APPEARANCE = 'jax_perception_node.detection.encoders.pooled:appearance'
STRIDE = 4
TIMES = (SWEEP_T0, SWEEP_T0 + 0.1)      # s into the drive: the two frames used in turn


def image_params(plan: Plan, encoder: str = APPEARANCE) -> dict:
    """Return the shipped four cameras sending images to ``encoder``."""
    params = bench_params(plan, 'shipped')
    for name in params['cameras.names']:
        params[f'cameras.{name}.input'] = 'image'
    params.update({'encoder.module': encoder, 'encoder.stride': STRIDE})
    return params


def _jpegs(cfg, drive: SyntheticDrive, t: float) -> list:
    """Return (camera, CompressedImage) of every camera's JPEG (quality 90) at t."""
    return [(cam.name, image_message(drive.camera_image(cam.name, t, STRIDE), 'jpeg'))
            for cam in cfg.cameras]


def bench_images(plan: Plan, use_torch: bool, log: Callable[[str], None]) -> dict:
    """Time the three frames and the encoder; return ratios to the LiDAR-only frame."""
    size = plan.sizes[-1] if plan.tiny else HEADLINE_POINTS
    configs = {'lidar': config_from_parameters(bench_params(plan, 0)),
               'features': config_from_parameters(bench_params(plan, 'shipped')),
               'images': config_from_parameters(image_params(plan)),
               'learned': config_from_parameters(image_params(plan, learned.NAME))}
    pipes = {}
    for name, cfg in configs.items():
        pipes[name] = BevPipeline(cfg)
        pipes[name].warmup()
    inputs = Inputs(configs['lidar'])
    points = inputs.points(size)
    drive = SyntheticDrive(configs['features'])
    maps = [{c.name: drive.camera_features(c.name, t) for c in configs['features'].cameras}
            for t in TIMES]
    jpegs = [_jpegs(configs['images'], drive, t) for t in TIMES]
    decoder = ImageDecoder(*configs['images'].image_shape[:2])
    buffers = {c.name: np.empty(configs['images'].image_shape, np.uint8)
               for c in configs['images'].cameras}

    def image_frame(pipe):
        def run(k):
            images = {name: decoder.decode(msg, buffers[name]) for name, msg in jpegs[k]}
            return pipe.process(points, images).features
        return run

    runs = {'lidar': lambda k: pipes['lidar'].process(points).features,
            'features': lambda k: pipes['features'].process(points, maps[k]).features,
            'images': image_frame(pipes['images']), 'learned': image_frame(pipes['learned'])}
    samples = {name: [] for name in runs}
    log(f'images: {size} points, frames interleaved')
    compiles = compile_count()
    for rep in range(2 * plan.reps + 2):
        for name, run in runs.items():
            start = time.perf_counter()
            run(rep % 2)
            if rep >= 2:            # one untimed frame of each input first
                samples[name].append(time.perf_counter() - start)
    frame_ms = {name: rounded(1e3 * float(np.median(s))) for name, s in samples.items()}
    result = {'points': size, 'cameras': len(configs['images'].cameras),
              'image': '%dx%d' % configs['images'].image_shape[1::-1], 'frame_ms': frame_ms,
              'images_over_lidar': rounded(frame_ms['images'] / frame_ms['lidar']),
              'learned_over_lidar': rounded(frame_ms['learned'] / frame_ms['lidar']),
              'features_over_lidar': rounded(frame_ms['features'] / frame_ms['lidar']),
              'compiles_after_warmup': compile_count() - compiles}
    images = [buffers[name] for name in pipes['images'].camera_names]
    result['encoder'] = _encoder_rows(pipes['images'], images, plan, use_torch, torch_appearance)
    result['learned_encoder'] = _encoder_rows(pipes['learned'], images, plan, use_torch,
                                              torch_learned)
    result['decode'] = decode_rows(2 if plan.tiny else plan.reps)
    return result


def _encoder_rows(pipe: BevPipeline, images: list, plan: Plan, use_torch: bool,
                  peer) -> dict:
    """
    Time the encoder alone on the cameras' images: JAX (jit, vmap) and its PyTorch ``peer``.

    ``peer(images, stride, channels, params)`` takes a uint8 tensor [N, H_i, W_i, 3] and the
    encoder's parameters as NumPy arrays.
    """
    import jax
    batch = np.stack(images)
    encode = jax.jit(jax.vmap(pipe.encoder.spec.apply, in_axes=(None, 0)))
    params = pipe.encoder.params
    want = np.asarray(encode(params, batch))
    impls = {'jax': lambda: encode(params, batch).block_until_ready()}
    rows = {}
    if use_torch:
        import torch
        torch_batch = torch.from_numpy(batch)
        with torch.no_grad():
            got = peer(torch_batch, STRIDE, want.shape[-1], params).numpy()
        rows['torch_max_abs_diff'] = float(np.abs(got - want).max())
        if not np.allclose(got, want, rtol=RTOL, atol=RTOL):
            raise ValueError(f'the PyTorch encoder differs from the JAX one by '
                             f'{rows["torch_max_abs_diff"]:.3g}')
        impls['torch'] = torch.no_grad()(lambda: peer(torch_batch, STRIDE, want.shape[-1],
                                                      params))
    samples = {name: [] for name in impls}
    for _ in range(max(3, 4 * plan.reps)):
        for name, run in impls.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    rows.update({f'{name}_ms': rounded(1e3 * float(np.median(s)))
                 for name, s in samples.items()})
    return rows


def torch_appearance(images, stride: int, channels: int, params=()):
    """
    Run the PyTorch peer of ``appearance``: uint8[N, H_i, W_i, 3] -> float32[N, H_f, W_f, C].

    The same arithmetic in eager PyTorch: integer block sums, Sobel and 5 x 5 box filters as
    convolutions on the edge-replicated luminance.
    """
    import torch
    import torch.nn.functional as F
    n, height, width, _ = images.shape
    rows, cols = height // stride, width // stride
    sums = images.to(torch.int32).reshape(n, rows, stride, cols, stride, 3).sum(dim=(2, 4))
    rgb = sums.to(torch.float32) * (1.0 / (255.0 * stride * stride))
    red, green, blue = rgb.unbind(-1)
    lum = LUMA[0] * red + LUMA[1] * green + LUMA[2] * blue
    sobel = torch.tensor([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]]) / -8.0
    kernels = torch.stack([sobel, sobel.T])[:, None]
    padded = F.pad(lum[:, None], (1, 1, 1, 1), mode='replicate')
    grads = F.conv2d(padded, kernels)
    box = F.avg_pool2d(F.pad(lum[:, None], (2, 2, 2, 2), mode='replicate'), 5, stride=1)[:, 0]
    saturation = rgb.amax(-1) - rgb.amin(-1)
    features = torch.stack([red, green, blue, lum, grads[:, 0], grads[:, 1], lum - box,
                            saturation], dim=-1)
    return features[..., torch.arange(channels) % 8]


def torch_learned(images, stride: int, channels: int, params):
    """
    Run the PyTorch peer of ``encoders.learned``: the same network, layer by layer, eager.

    The appearance features of :func:`torch_appearance`, the s x s patches, then the 1 x 1
    layers as matrix products and the 3 x 3 depthwise layer as a grouped convolution (NCHW).
    """
    import torch
    import torch.nn.functional as F
    n, height, width, _ = images.shape
    rows, cols = height // stride, width // stride
    base = torch_appearance(images, stride, 8)
    patches = images.reshape(n, rows, stride, cols, stride, 3).permute(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(n, rows, cols, -1).to(torch.float32) * (1.0 / 255.0) - 0.5

    def dense(x, conv):
        return x @ torch.from_numpy(np.asarray(conv.weight)[0, 0]) + torch.from_numpy(
            np.asarray(conv.bias))
    x = torch.relu(dense(torch.cat([patches, base], dim=-1), params.embed))
    kernel = torch.from_numpy(np.asarray(params.block.depthwise.weight)).permute(2, 0, 1)
    spatial = F.conv2d(x.permute(0, 3, 1, 2), kernel[:, None], padding=1,
                       groups=kernel.shape[0]).permute(0, 2, 3, 1)
    x = x + torch.relu(dense(spatial, params.block.pointwise))
    return base[..., torch.arange(channels) % 8] + dense(x, params.out)
