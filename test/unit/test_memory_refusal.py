"""A pipeline that needs more memory than there is: one ConfigError naming the keys."""

from configs import camera_params, small_config
import jax
from jax_perception_node.core.memory_refusal import refused_out_of_memory
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.settings.parameters import ConfigError
import pytest


def test_camera_maps_larger_than_the_memory_are_refused_naming_the_keys():
    # Two cameras of 8192 x 8192 x 1024 float32 maps, each bound kept: the staging would be
    # 1 TiB (NumPy's MemoryError at construction, a traceback before).
    big = {**camera_params('front', height=8192, width=8192, channels=1024, cx=4095.5,
                           cy=4095.5),
           **camera_params('rear', height=8192, width=8192, channels=1024, cx=4095.5,
                           cy=4095.5)}
    with pytest.raises(ConfigError, match=r'^out of memory: the pipeline asked for [0-9.]+ [GT]iB '
                                          r'at once; lower grid\.resolution .*'
                                          r'accumulation\.num_sweeps'):
        BevPipeline(small_config(2, **big))


def test_xla_out_of_memory_gives_the_size_it_asked_for():
    @refused_out_of_memory
    def warm():
        raise jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating '
                                         '7516209168 bytes.')
    with pytest.raises(ConfigError, match='asked for 7.00 GiB at once'):
        warm()

    @refused_out_of_memory
    def broken():
        raise jax.errors.JaxRuntimeError('INTERNAL: something else')
    with pytest.raises(jax.errors.JaxRuntimeError, match='INTERNAL'):
        broken()
