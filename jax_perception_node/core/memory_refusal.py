"""
A pipeline that needs more memory than there is: one ConfigError naming the keys, no traceback.

Every size is within its own bound, but together a fine grid, many height levels, cameras
with large maps or images, a huge bucket or many accumulated sweeps can ask for more than the
machine has (a 4096 x 4096 grid with four cameras: 7.5 GB for the lift tables at warm-up).
XLA then raises RESOURCE_EXHAUSTED and NumPy MemoryError, both tracebacks; this turns them
into the config layer's error, which the node and the CLI print as one line.
"""

import functools
import re

import jax

from .plugin_failure import plugin_failure
from ..settings.parameters import ConfigError

# The keys that size the pipeline's memory, named in the message.
SIZING_KEYS = ('grid.resolution and the x / y ranges', 'fusion.num_heights',
               'fusion.max_samples_per_cell', 'the cameras and their map or image sizes',
               'buckets', 'accumulation.num_sweeps')


def refused_out_of_memory(method):
    """
    Decorate a BevPipeline step: out of memory raises ConfigError with the size asked for.

    A plug-in failing as it runs (``plugin_failure``, the pipeline's ``plugins``) too.
    """
    @functools.wraps(method)
    def step(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except MemoryError as exc:       # NumPy: "Unable to allocate 1.00 TiB for an array ..."
            asked = str(exc).split(' for ')[0].removeprefix('Unable to allocate ').replace(
                '. ', ' ')
        except jax.errors.JaxRuntimeError as exc:
            if 'RESOURCE_EXHAUSTED' not in str(exc):
                failed = plugin_failure(exc, args[0] if args else None)
                if failed is None:
                    raise
                raise failed from None
            found = re.search(r'allocating (\d+) bytes', str(exc))
            asked = f'{int(found[1]) / 2 ** 30:.2f} GiB' if found else 'more'
        raise ConfigError(f'out of memory: the pipeline asked for {asked} at once; lower '
                          f'{", ".join(SIZING_KEYS)} (docs/parameters.md, "Memory")') from None
    return step
