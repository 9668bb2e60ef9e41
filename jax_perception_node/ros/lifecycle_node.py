"""
The managed node: the same serving core as ``jax_perception_node``, run as a lifecycle node.

Console script ``jax_perception_lifecycle_node``. It starts unconfigured, with its parameters
declared and nothing else; ``configure`` validates them and warms every bucket (a bad value
fails the transition, with the reason logged); ``activate`` subscribes and serves; ``deactivate``
stops serving (counters kept); ``cleanup`` releases the pipeline; ``shutdown`` works from any
state and ends the process. Drive it with the lifecycle_msgs services ``<node>/change_state``
and ``<node>/get_state`` (``ros2 lifecycle set /jax_perception configure``), or launch it with
``managed:=true``: the launch file configures and activates it unless ``autostart:=false`` (the
node never transitions itself, so a lifecycle manager that owns it sees only its own requests).
"""

import sys
import threading

from rclpy.exceptions import ParameterException
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

from .node import NODE_NAME, run
from .serving import PerceptionCore
from ..settings.parameters import ConfigError

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class JaxPerceptionLifecycleNode(LifecycleNode):
    """Lifecycle node ``jax_perception``: see the module doc for what each transition does."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.core = PerceptionCore(self, self.create_lifecycle_publisher,
                                   self.destroy_lifecycle_publisher)
        self.core.declare()
        self.done = threading.Event()      # set once finalized: the process may end
        self._active = False
        # rclpy's handler raises RCLError out of the executor, ending the process, for a
        # transition the current state does not offer; rclcpp answers success=false.
        service = self._service_change_state
        self._change_state, service.callback = service.callback, self._on_change_state

    def _on_change_state(self, request, response):
        """Answer a change_state request; one not offered in this state: false, and a log line."""
        wanted = request.transition
        offered = {(t[0], t[1]) for t in self._state_machine.available_transitions}
        state = self._state_machine.current_state[1]
        if not any(wanted.id == tid if not wanted.label else wanted.label == label
                   for tid, label in offered):
            names = ', '.join(sorted({label for _, label in offered})) or 'none'
            asked = f'"{wanted.label}"' if wanted.label else f'id {wanted.id}'
            self.get_logger().warning(f'transition {asked} refused: not available in state '
                                      f'"{state}" (available: {names})')
            response.success = False
            return response
        try:
            return self._change_state(request, response)
        except _rclpy.RCLError as exc:     # the offer changed meanwhile: still an answer
            self.get_logger().error(f'transition failed in state "{state}": {exc}')
            response.success = False
            return response

    def on_configure(self, state) -> TransitionCallbackReturn:
        """Validate the parameters, build and warm the pipeline; FAILURE on a bad value."""
        try:
            self.core.configure()
        except (ConfigError, ParameterException) as exc:
            self.get_logger().error(f'configure failed: bad parameter {exc}')
            return FAILURE
        return super().on_configure(state)

    def on_activate(self, state) -> TransitionCallbackReturn:
        """Enable the lifecycle publishers, then subscribe and start the worker."""
        result = super().on_activate(state)
        if result == SUCCESS:
            self.core.activate()
            self._active = True
        return result

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        """Stop serving (the frame in progress finishes), then disable the publishers."""
        self._stop_serving()
        return super().on_deactivate(state)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        """Release publishers and pipeline; configure builds them afresh."""
        self.core.cleanup()
        return super().on_cleanup(state)

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        """From any state: stop serving, release everything, and let the process end."""
        self._release()
        self.done.set()
        return super().on_shutdown(state)

    def on_error(self, state) -> TransitionCallbackReturn:
        """Release everything after a failed transition and return to unconfigured."""
        self.get_logger().error(f'error in state {state.label}: releasing the pipeline')
        self._release()
        return SUCCESS

    def _stop_serving(self) -> None:
        if self._active:
            self.core.deactivate()
            self._active = False

    def _release(self) -> None:
        self._stop_serving()
        if self.core.pipe is not None:
            self.core.cleanup()

    def destroy_node(self) -> None:
        """Stop the worker before the publishers go away."""
        self._stop_serving()
        super().destroy_node()


def main(args=None) -> int:
    """Console script ``jax_perception_lifecycle_node``; exits when shut down or signalled."""
    return run('jax_perception_lifecycle_node', JaxPerceptionLifecycleNode, args)


if __name__ == '__main__':
    sys.exit(main())
