"""Test configurations: small grids and cameras that compile fast, and the repository's paths."""

import ast
import os
from pathlib import Path

from jax_perception_node.settings.config import config_from_parameters, PipelineConfig

REPO = Path(__file__).resolve().parent.parent
PARAMS_FILE = REPO / 'config' / 'jax_perception.param.yaml'
# Vendor sources the tests use as oracles (not on the package index): see ../shared/vendor.
SHARED = REPO.parent / 'shared'

FRONT = [-0.5, 0.5, -0.5, 0.5]      # optical z -> grid +x, x -> -y, y -> -z
REAR = [-0.5, -0.5, 0.5, 0.5]       # optical z -> grid -x
# The run's executable store (conftest makes one per run, shared by its workers): a small
# config met again loads its executables, 0.1 s against a 4 s warm-up. Tests of the store, of
# compiling and of what a warm-up logs give their own compilation_cache_dir.
TEST_STORE = 'JAX_PERCEPTION_TEST_STORE'


def camera_params(name: str, height: int = 12, width: int = 20, channels: int = 3,
                  fx: float = 8.0, fy: float = 8.0, cx: float = 9.5, cy: float = 5.5,
                  translation=(1.0, 0.0, 1.5), rotation=FRONT) -> dict:
    """Flat parameters of one camera block."""
    k = f'cameras.{name}.'
    return {k + 'height': height, k + 'width': width, k + 'channels': channels,
            k + 'fx': fx, k + 'fy': fy, k + 'cx': cx, k + 'cy': cy,
            k + 'translation': list(translation), k + 'rotation_xyzw': list(rotation)}


def small_params(cameras: int = 2, **overrides) -> dict:
    """Return a 32 x 48 grid, tiny buckets and up to two small cameras (compiles in ~1 s)."""
    params = {
        'grid.x_min': -8.0, 'grid.x_max': 8.0, 'grid.y_min': -12.0, 'grid.y_max': 12.0,
        'grid.z_min': -2.0, 'grid.z_max': 2.0, 'grid.resolution': 0.5,
        'lidar.translation': [0.25, -0.5, 0.5], 'lidar.rotation_xyzw': [0.0, 0.0, 0.0, 1.0],
        'buckets': [64, 256, 1024], 'compilation_cache_dir': os.environ.get(TEST_STORE, ''),
        'fusion.num_heights': 3, 'cameras.names': ['front', 'rear'][:cameras],
    }
    if cameras >= 1:
        params.update(camera_params('front'))
    if cameras >= 2:
        params.update(camera_params('rear', translation=(-1.0, 0.0, 1.5), rotation=REAR))
    params.update(overrides)
    return params


def small_config(cameras: int = 2, **overrides) -> PipelineConfig:
    """small_params() validated."""
    return config_from_parameters(small_params(cameras, **overrides))


def absolute_imports(module: str) -> set[str]:
    """Return the top-level packages a module of jax_perception_node imports (not relative)."""
    source, = (REPO / 'jax_perception_node').glob(f'*/{module}.py')
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split('.')[0])
    return imported
