"""
The plug-ins' checkpoints in force (head, image encoder): read off the frame path, swapped live.

Mixins of ``BevPipeline``: the head's weights are a traced argument of the head's executable,
the encoder's of every frame executable, so a live ``head.weights`` or ``encoder.weights``
change puts new parameters on the device for the next frame, without a compile.
"""

from contextlib import contextmanager

import jax

from .box_decode import param_leaves
from ..detection.encoder import EncoderInput, load_encoder
from ..settings.config import PipelineConfig
from ..settings.parameters import ConfigError


class HeadWeights:
    """``BevPipeline``'s head weights; it sets ``cfg``, ``head``, ``output_memory``."""

    def head_key(self) -> str:
        """Return what the head's stored executable is keyed on, beside its arguments' shapes."""
        return repr((self.head.identity, self.cfg.head.max_objects, self.output_memory))

    def set_head_weights(self, path: str) -> None:
        """
        Load a checkpoint (same shapes) into the head for the next frame, without a compile.

        '' takes the shipped weights (none shipped: the factory's). Raises ConfigError
        (``head.weights``) for a file that cannot be read or does not fit; nothing changes then.
        """
        self.use_head_weights(*self.read_head_weights(path))

    def read_head_weights(self, path: str):
        """Read and check ``head.weights`` = ``path``; (file, parameters) for use_head_weights."""
        if self.head is None:
            raise ConfigError('head.weights: no head is configured (head.module is empty)')
        return self.head.checkpoint(path)

    def use_head_weights(self, target, params) -> None:
        """Put checked parameters (``read_head_weights``) on the device for the next frame."""
        self._head_params, self.head_weights = param_leaves(params), target

    @contextmanager
    def head_paused(self):
        """
        Dispatch the frames started inside without the head (``objects`` None), then restore it.

        The same executables, buffers and calibration with the head and without it, so what
        the head adds to a frame is timed alone (``bench`` part 'head', on the CPU). The BEV
        keeps the placement a head gives it (device memory, where a pipeline without a head
        writes pinned host memory: a fetch on a GPU). No compile. Not for a pipeline that
        another thread dispatches frames on meanwhile.
        """
        executable, self._head_executable = self._head_executable, None
        try:
            yield
        finally:
            self._head_executable = executable


class EncoderWeights:
    """``BevPipeline``'s image encoder and its weights (``load_image_encoder`` sets them)."""

    def load_image_encoder(self, cfg: PipelineConfig, map_shape) -> None:
        """Load ``encoder.module`` for cameras with images (``encoder`` None otherwise)."""
        self.encoder = self._encoder_params = self.encoder_weights = None
        if cfg.camera_images:
            height, width, _ = cfg.image_shape
            self.encoder = load_encoder(cfg.encoder.module, cfg.encoder.weights, EncoderInput(
                height, width, cfg.encoder.stride, *map_shape))
            self.use_encoder_weights(self.encoder.weights_path, self.encoder.params)

    def set_encoder_weights(self, path: str) -> None:
        """Load an encoder checkpoint (same shapes) for the next frame, without a compile."""
        self.use_encoder_weights(*self.read_encoder_weights(path))

    def read_encoder_weights(self, path: str):
        """Read and check ``encoder.weights`` = ``path``; (file, parameters); ConfigError."""
        if self.encoder is None:
            raise ConfigError('encoder.weights: no image encoder is configured (no camera has '
                              'input: image)')
        return self.encoder.checkpoint(path)

    def use_encoder_weights(self, target, params) -> None:
        """Put checked encoder parameters on the device for the next frame."""
        self._encoder_params, self.encoder_weights = jax.device_put(params), target
