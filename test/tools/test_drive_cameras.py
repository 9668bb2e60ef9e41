"""The synthetic drive's cameras: label-free appearance features of a rendered image."""

from configs import PARAMS_FILE
from jax_perception_node.settings.config import load_config
from jax_perception_node.tools.synthetic_drive import CAMERA_CHANNELS, SyntheticDrive
from jax_perception_node.tools.synthetic_drive.camera_render import (BICYCLES, CLOTHING,
                                                                     TROUSERS, VEHICLE_PAINTS)
import numpy as np
import pytest

TIMES = (2.0, 4.0, 5.5, 7.0)          # farmland, town, town, underpass
GROUND, SKY = 0, -1                   # scene classes (Surfaces.cls)
VEHICLES, PEDESTRIAN, CYCLIST = (1, 4), 5, 6     # cars and large vehicles; people
LUMA = (0.299, 0.587, 0.114)


@pytest.fixture(scope='module')
def cfg():
    return load_config(PARAMS_FILE)


@pytest.fixture(scope='module')
def views(cfg):
    """(camera, t, feature map, depth map, class map, albedo) per shipped camera at TIMES."""
    drive = SyntheticDrive(cfg, seed=5)
    out = []
    for t in TIMES:
        for cam in cfg.cameras:
            seen = drive.camera_surfaces(cam.name, t)
            shape = (cam.height, cam.width)
            out.append((cam, t, drive.camera_features(cam.name, t),
                        seen.depth.reshape(shape), seen.cls.reshape(shape),
                        seen.colour.reshape(*shape, 3)))
    return out


def padded(image, n):
    return np.pad(image, n, mode='edge')


def test_channels_are_the_images_colour_luminance_edges_contrast_and_saturation(views):
    assert CAMERA_CHANNELS == ('red', 'green', 'blue', 'luminance', 'grad_u', 'grad_v',
                               'local_contrast', 'saturation')
    for cam, _, feats, _, _, _ in views:
        assert feats.shape == (cam.height, cam.width, 8) and feats.dtype == np.float32
        rgb = feats[..., :3].astype(np.float64)
        lum = rgb @ LUMA
        assert np.allclose(feats[..., 3], lum, atol=1e-6)
        # Sobel / 8 and 5 x 5 box mean, written out with np.pad here.
        p = padded(lum, 1)
        dx = p[:, 2:] - p[:, :-2]
        dy = p[2:] - p[:-2]
        assert np.allclose(feats[..., 4], (dx[:-2] + 2 * dx[1:-1] + dx[2:]) / 8, atol=1e-5)
        assert np.allclose(feats[..., 5], (dy[:, :-2] + 2 * dy[:, 1:-1] + dy[:, 2:]) / 8,
                           atol=1e-5)
        p = padded(lum, 2)
        mean = sum(p[i:i + cam.height, j:j + cam.width] for i in range(5) for j in range(5)) / 25
        assert np.allclose(feats[..., 6], lum - mean, atol=1e-5)
        assert np.allclose(feats[..., 7], rgb.max(-1) - rgb.min(-1), atol=1e-6)


def balanced_accuracy(x, mask):
    """Best balanced accuracy of one threshold on x (either side) telling mask from the rest."""
    order = np.argsort(x, kind='stable')
    inside = mask[order]
    below_in = np.cumsum(inside) / inside.sum()
    below_out = np.cumsum(~inside) / (~inside).sum()
    score = 0.5 * (below_in + 1.0 - below_out)
    return max(score.max(), (1.0 - score).max())


def explained_by(x, key, bins=100):
    """R^2 of x by its mean in quantile bins of key: 1 when x is a function of key."""
    edges = np.quantile(key, np.linspace(0.0, 1.0, bins + 1))
    b = np.clip(np.searchsorted(edges, key, 'right') - 1, 0, bins - 1)
    means = np.bincount(b, x, bins) / np.maximum(np.bincount(b, None, bins), 1)
    return 1.0 - np.sum((x - means[b]) ** 2) / np.sum((x - x.mean()) ** 2)


def test_no_channel_is_a_class_or_a_depth(views):
    feats = np.concatenate([v[2].reshape(-1, 8) for v in views]).astype(np.float64)
    depth = np.concatenate([v[3].ravel() for v in views])
    cls = np.concatenate([v[4].ravel() for v in views])
    vehicle, solid = np.isin(cls, VEHICLES), np.isfinite(depth)
    assert 0.05 < vehicle.mean() < 0.5
    # The measures catch the old oracle channels: a one-hot class, and 1 / depth.
    assert balanced_accuracy(vehicle.astype(float), vehicle) == 1.0
    assert explained_by(1.0 / depth[solid], 1.0 / depth[solid]) > 0.99
    for k, name in enumerate(CAMERA_CHANNELS):
        x = feats[:, k]
        assert abs(np.corrcoef(x, vehicle)[0, 1]) < 0.6, name
        assert balanced_accuracy(x, vehicle) < 0.9, name
        assert explained_by(x[solid], 1.0 / depth[solid]) < 0.6, name


def test_vehicles_show_by_their_colour_and_edges(views):
    pairs, boundary, road = [], [], []
    for _, _, feats, _, cls, _ in views:
        # A vehicle pixel right above a road pixel: its colour against the road's.
        above = np.isin(cls[:-1], VEHICLES) & (cls[1:] == GROUND)
        pairs.append(np.abs(feats[:-1, :, :3][above] - feats[1:, :, :3][above]).max(axis=-1))
        grad = np.hypot(feats[..., 4], feats[..., 5])
        c = np.pad(cls, 1, mode='edge')
        same = ((c[:-2, 1:-1] == cls) & (c[2:, 1:-1] == cls) & (c[1:-1, :-2] == cls)
                & (c[1:-1, 2:] == cls))
        boundary.append(grad[np.isin(cls, VEHICLES) & ~same])
        road.append(grad[(cls == GROUND) & same])
    pairs, boundary, road = (np.concatenate(a) for a in (pairs, boundary, road))
    assert len(pairs) > 50 and np.mean(pairs > 0.03) > 0.8
    assert len(boundary) > 200 and np.median(boundary) > 3.0 * np.median(road)


def in_palette(colours, *palettes):
    """Whether each albedo (N, 3) is an entry of one of the palettes."""
    table = np.concatenate(palettes)
    return np.any(np.all(np.abs(colours[:, None] - table[None]) < 1e-12, axis=-1), axis=1)


def test_people_wear_clothes_and_ride_bicycles(views):
    # Albedo by class: people in clothing tones (tops over legs or bicycles), vehicles in paint
    # or glass; and the people stand out from the ground they stand on.
    counts = {PEDESTRIAN: 0, CYCLIST: 0}
    contrast = []
    for _, _, feats, _, cls, colour in views:
        for kind, lower in ((PEDESTRIAN, TROUSERS), (CYCLIST, BICYCLES)):
            mask = cls == kind
            counts[kind] += int(mask.sum())
            assert np.all(in_palette(colour[mask], CLOTHING, lower))
        vehicle = np.isin(cls, VEHICLES)
        glass = np.all(np.abs(colour[vehicle] - [0.05, 0.06, 0.08]) < 1e-12, axis=-1)
        assert np.all(in_palette(colour[vehicle][~glass], VEHICLE_PAINTS))
        person = np.isin(cls, (PEDESTRIAN, CYCLIST))
        if person.any():
            contrast.append(np.abs(feats[..., :3][person].mean(0) - feats[..., :3][
                cls == GROUND].mean(0)).max())
    assert counts[PEDESTRIAN] > 20 and counts[CYCLIST] > 5, counts
    assert np.median(contrast) > 0.03


def test_exposure_varies_per_frame_and_the_drive_reproduces_it(cfg):
    front = cfg.cameras[0]
    drive = SyntheticDrive(cfg, seed=2, num_cameras=1)
    times = [k / 12.0 for k in range(12)]
    # The sky's colour depends only on each ray's elevation: frames differ by exposure alone.
    sky = np.logical_and.reduce([drive.camera_surfaces('front', t).cls == SKY for t in times])
    assert sky.sum() > 100
    maps = [drive.camera_features('front', t).reshape(-1, 8) for t in times]
    # Pixel = (gain x linear) ** (1 / 2.2) + noise: the gain ratio to the first frame.
    gains = np.array([np.median(m[sky, 3] / maps[0][sky, 3]) ** 2.2 for m in maps])
    assert np.all((gains > 0.8 / 1.2 - 0.02) & (gains < 1.2 / 0.8 + 0.02))
    assert gains.max() / gains.min() > 1.1
    again = SyntheticDrive(cfg, seed=2, num_cameras=1)
    assert all(np.array_equal(m.reshape(front.height, front.width, 8),
                              again.camera_features('front', t)) for m, t in zip(maps, times))
