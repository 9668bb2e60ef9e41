"""Every dot in the compiled functions states HIGHEST precision: caught on the CPU, no GPU."""

import functools

from configs import small_config
import jax
from jax.extend.core import ClosedJaxpr, jaxprs_in_params
import jax.numpy as jnp
from jax_perception_node.core import kernels, lift
from jax_perception_node.core.kernel_inputs import calibration_arrays
from jax_perception_node.core.pipeline import BevPipeline
import numpy as np

HIGHEST = jax.lax.Precision.HIGHEST


def dots_without_highest(closed: ClosedJaxpr) -> list[str]:
    """Return every dot_general / conv of a jaxpr (nested ones too) not at HIGHEST precision."""
    found, stack = [], [closed.jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            if eqn.primitive.name in ('dot_general', 'conv_general_dilated'):
                precision = eqn.params.get('precision')
                if not (isinstance(precision, tuple)
                        and all(p == HIGHEST for p in precision)):
                    found.append(f'{eqn.primitive.name} precision={precision} '
                                 f'at {eqn.source_info.traceback}')
            stack.extend(jaxprs_in_params(eqn.params))
    return found


def test_the_audit_catches_a_default_precision_dot():
    # Positive control: a plain matmul and a plain einsum, also inside a nested jit.
    x = jnp.ones((4, 3), jnp.float32)
    assert len(dots_without_highest(jax.make_jaxpr(lambda a: a @ a.T)(x))) == 1
    nested = jax.jit(lambda a: jnp.einsum('ij,kj->ik', a, a))
    assert len(dots_without_highest(jax.make_jaxpr(lambda a: nested(a) + 1)(x))) == 1
    exact = jax.make_jaxpr(lambda a: jnp.matmul(a, a.T, precision=HIGHEST))(x)
    assert dots_without_highest(exact) == []


def test_frame_and_geometry_functions_leave_no_precision_to_the_backend(tmp_path):
    np.savez(tmp_path / 'w.npz', W=np.ones((10, 4)), b=np.zeros(4))
    # Both lens models in the geometry: the distortion is written out too.
    cfg = small_config(**{'fusion.weights_file': str(tmp_path / 'w.npz'),
                          'fusion.activation': 'relu',
                          'cameras.front.distortion_model': 'plumb_bob',
                          'cameras.front.distortion': [-0.2, 0.05, 0.001, -0.002, 0.01],
                          'cameras.rear.distortion_model': 'equidistant',
                          'cameras.rear.distortion': [0.1, -0.02, 0.003, -0.001]})
    pipe = BevPipeline(cfg)
    pipe.warmup()
    frame = jax.make_jaxpr(functools.partial(
        kernels.bev_frame, height=pipe.height, width=pipe.width, activation='relu'))(
        pipe.frame_args(np.zeros((64, 4), np.float32), 0))
    # The projection is a real dot: the audit sees it, at HIGHEST.
    assert 'dot_general' in str(frame)
    assert dots_without_highest(frame) == []
    cam = cfg.cameras[0]
    static = {'height': pipe.height, 'width': pipe.width,
              'num_heights': cfg.fusion.num_heights, 'map_height': cam.height,
              'map_width': cam.width}
    calibration = (calibration_arrays(cfg.cameras), cfg.grid.vector())
    for function in (functools.partial(lift.lift_geometry, slots=pipe.lift_slots),
                     lift.lift_sample_counts):
        closed = jax.make_jaxpr(functools.partial(function, **static))(*calibration)
        # The lens models are in this jaxpr (the fisheye's atan), and no dot is.
        assert 'atan' in str(closed)
        assert dots_without_highest(closed) == []


def test_the_accumulating_frame_leaves_no_precision_to_the_backend():
    cfg = small_config(1, **{'accumulation.num_sweeps': 3})
    pipe = BevPipeline(cfg)
    pipe.warmup()
    ring = jax.ShapeDtypeStruct((2, cfg.buckets[-1], 4), jnp.float32)
    frame = jax.make_jaxpr(functools.partial(
        kernels.bev_frame, height=pipe.height, width=pipe.width, activation='none'))(
        pipe.frame_args(np.zeros((64, 4), np.float32), 0), ring)
    # The accumulating variant really is in this jaxpr: the ring update and the lag sums.
    assert 'dynamic_update_slice' in str(frame)
    assert dots_without_highest(frame) == []


def test_the_reference_head_leaves_no_precision_to_the_backend():
    """The head's executable (the shipped CenterPoint head and its decoding) is audited too."""
    from jax_perception_node.core.box_decode import head_function
    from jax_perception_node.detection.head import HeadInput, load_head
    from jax_perception_node.settings.parameters import REFERENCE_HEAD
    head = load_head(REFERENCE_HEAD, '', HeadInput(32, 48, 15, 0.4))
    jitted, specs, _ = head_function(head.spec, 8, head.params, (32, 48, 15), None)
    closed = jax.make_jaxpr(jitted)(*specs)
    # Its 1 x 1 layers are matrix products (its depthwise kernels are elementwise).
    assert 'dot_general' in str(closed)
    assert dots_without_highest(closed) == []
