"""
The sample bag's camera messages: each frame as a feature map or as the image itself.

Feature maps (the default): a ``32FC<C>`` sensor_msgs/Image on ``topics.camera_topic(name)``,
with a CameraInfo of an image :data:`IMAGE_SCALE` times the map. Images (``camera_images``):
the camera's colour image at ``image_scale`` times the map (``SyntheticDrive.camera_image``),
``raw`` as an ``rgb8`` sensor_msgs/Image on ``camera_image_topic(name)`` or ``jpeg`` as a
sensor_msgs/CompressedImage (format 'jpeg', Pillow at :data:`JPEG_QUALITY`, 4:2:0 chroma
subsampling, baseline, no metadata) on ``camera_compressed_topic(name)``, the names
image_transport gives them; the CameraInfo then describes that very image. Either way the
CameraInfo's K scales back to the configured intrinsics exactly.
"""

import io
from typing import Callable

from jax_perception_node.bags.bagio import TYPESTORE
from jax_perception_node.bags.topics import (camera_compressed_topic, camera_image_topic,
                                             camera_topic)
import numpy as np
from PIL import Image

from .camera_render import check_scale, scaled_intrinsics
from .drive import SyntheticDrive

IMAGE_SCALE = 8             # feature maps: CameraInfo describes an image this many times the map
CAMERA_IMAGES = ('raw', 'jpeg')
JPEG_QUALITY = 90           # Pillow's scale; with 4:2:0 subsampling, what camera drivers send
# Metadata custom_data keys of an image bag's choices (as bagio.SAMPLE_SEED_KEY).
CAMERA_IMAGES_KEY = 'jax_perception.camera_images'
IMAGE_SCALE_KEY = 'jax_perception.image_scale'
_TYPES = {None: 'sensor_msgs/msg/Image', 'raw': 'sensor_msgs/msg/Image',
          'jpeg': 'sensor_msgs/msg/CompressedImage'}
_TOPICS = {None: camera_topic, 'raw': camera_image_topic, 'jpeg': camera_compressed_topic}


def image_record(camera_images: str | None, image_scale: int) -> dict:
    """
    Return the summary's camera_images and image_scale (None with feature maps).

    Raises ValueError for a ``camera_images`` other than None, 'raw' and 'jpeg', or a scale
    outside 1..8 (checked with feature maps too: a bad argument is a bad argument).
    """
    if camera_images is not None and camera_images not in CAMERA_IMAGES:
        raise ValueError(f"camera_images must be None, 'raw' or 'jpeg', got {camera_images!r}")
    check_scale(image_scale)
    return {'camera_images': camera_images,
            'image_scale': None if camera_images is None else int(image_scale)}


def image_custom_data(record: dict) -> dict[str, str]:
    """Return the metadata custom_data of ``image_record``'s entries (none for feature maps)."""
    if record['camera_images'] is None:
        return {}
    return {CAMERA_IMAGES_KEY: record['camera_images'],
            IMAGE_SCALE_KEY: str(record['image_scale'])}


def jpeg_bytes(rgb: np.ndarray) -> np.ndarray:
    """Encode a uint8 (H, W, 3) RGB image as a baseline JFIF JPEG, uint8 (n,)."""
    out = io.BytesIO()
    Image.fromarray(rgb, 'RGB').save(out, format='JPEG', quality=JPEG_QUALITY, subsampling='4:2:0')
    return np.frombuffer(out.getvalue(), np.uint8)


class CameraMessages:
    """
    Build each camera's frame and CameraInfo as rosbags messages.

    ``header(stamp_ns, frame_id)`` builds a std_msgs/Header. ``camera_images``: None (feature
    maps), 'raw' or 'jpeg'; ``image_scale``: the image's size over the map's (1..8; images
    only). ValueError for other values.
    """

    def __init__(self, drive: SyntheticDrive, header: Callable, camera_images: str | None = None,
                 image_scale: int | None = None):
        self.drive = drive
        self.header = header
        self.mode = camera_images
        self.scale = IMAGE_SCALE if camera_images is None else image_record(
            camera_images, image_scale)['image_scale']
        self.msgtype = TYPESTORE.types[_TYPES[camera_images]].__msgtype__
        self._cameras = {cam.name: cam for cam in drive.cameras}

    def topic(self, name: str) -> str:
        """Return camera ``name``'s topic for this kind of frame."""
        return _TOPICS[self.mode](name)

    def frame(self, name: str, stamp_ns: int, t: float):
        """Build camera ``name``'s frame at t (s): its feature map, or its image, in its frame."""
        types, cam = TYPESTORE.types, self._cameras[name]
        header = self.header(stamp_ns, cam.frame_id)
        if self.mode is None:
            feats = self.drive.camera_features(name, t).astype('<f4', copy=False)
            height, width, channels = feats.shape
            return types['sensor_msgs/msg/Image'](
                header=header, height=height, width=width, encoding=f'32FC{channels}',
                is_bigendian=0, step=width * channels * 4, data=feats.reshape(-1).view(np.uint8))
        rgb = self.drive.camera_image(name, t, self.scale)
        if self.mode == 'jpeg':
            return types['sensor_msgs/msg/CompressedImage'](header=header, format='jpeg',
                                                            data=jpeg_bytes(rgb))
        height, width, _ = rgb.shape
        return types['sensor_msgs/msg/Image'](
            header=header, height=height, width=width, encoding='rgb8', is_bigendian=0,
            step=width * 3, data=rgb.reshape(-1))

    def info(self, name: str, stamp_ns: int):
        """Build camera ``name``'s CameraInfo: K of an image ``scale`` times its map."""
        cam = self._cameras[name]
        # The inverse of the node's scaling: fx_f = fx / k, cx_f = (cx + 0.5) / k - 0.5.
        fx, fy, cx, cy = scaled_intrinsics(cam, self.scale)
        model = cam.distortion_model if cam.distortion_model != 'none' else 'plumb_bob'
        types = TYPESTORE.types
        return types['sensor_msgs/msg/CameraInfo'](
            header=self.header(stamp_ns, cam.frame_id), height=cam.height * self.scale,
            width=cam.width * self.scale, distortion_model=model,
            d=np.array(cam.distortion or (0.0,) * 5, np.float64),
            k=np.array([fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]), r=np.eye(3).reshape(-1),
            p=np.array([fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]),
            binning_x=0, binning_y=0,
            roi=types['sensor_msgs/msg/RegionOfInterest'](0, 0, 0, 0, False))
