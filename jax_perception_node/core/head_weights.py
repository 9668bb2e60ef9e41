"""
The head's checkpoint in force: read and checked off the frame path, swapped without a compile.

A mixin of ``BevPipeline``: the weights are a traced argument of the head's executable, so a
live ``head.weights`` change puts new parameters on the device for the next frame.
"""

import jax

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
        self._head_params, self.head_weights = jax.device_put(params), target
