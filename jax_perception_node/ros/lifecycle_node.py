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

With ``bond.enabled`` (the default) each activation starts a bond (bond.py) with Nav2's
lifecycle manager, which waits for it after ACTIVATE: heartbeats every
``bond.heartbeat_period_s`` on ``bond``, id = the node's name. Deactivate, cleanup, shutdown,
an error and the end of the process break it cleanly. A manager gone silent is logged, and the
node serves on; a manager that breaks the bond is answered, and the node serves on too.
"""

import sys
import threading
import traceback

from rclpy.exceptions import ParameterException
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

from .bond import Bond
from .node import NODE_NAME, run
from .serving import PerceptionCore
from ..settings.parameters import ConfigError

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
# How long the bond's "active: false" may take to reach the manager before the bond is released
# (cleanup, shutdown, the end of the process: nothing repeats it afterwards).
BOND_FLUSH_S = 0.5


class JaxPerceptionLifecycleNode(LifecycleNode):
    """Lifecycle node ``jax_perception``: see the module doc for what each transition does."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.core = PerceptionCore(self, self.create_lifecycle_publisher,
                                   self.destroy_lifecycle_publisher)
        self.core.declare()
        self.done = threading.Event()      # set once finalized: the process may end
        self._active = False
        self._bond = None
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
        except Exception:       # rclpy would turn it into an error transition, unlogged
            self._failed('configure')
            self.core.cleanup()     # whatever it built
            return FAILURE
        return super().on_configure(state)

    def on_activate(self, state) -> TransitionCallbackReturn:
        """Enable the lifecycle publishers, subscribe and start the worker, then the bond."""
        result = super().on_activate(state)
        if result == SUCCESS:
            try:
                self.core.activate()    # undoes itself when it raises
            except Exception:
                self._failed('activate')
                super().on_deactivate(state)
                return FAILURE
            self._active = True
            self._start_bond()
        return result

    def _failed(self, transition: str) -> None:
        """Log why a transition failed, with the traceback (a fault, not a bad parameter)."""
        self.get_logger().error(f'{transition} failed:\n{traceback.format_exc().rstrip()}')

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        """Break the bond, stop serving (a frame in progress finishes), disable the publishers."""
        self._break_bond()
        self._stop_serving()
        return super().on_deactivate(state)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        """Release the bond, publishers and pipeline; configure builds them afresh."""
        self._end_bond()
        self.core.cleanup()
        return super().on_cleanup(state)

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        """From any state: break the bond, stop serving, release everything, end the process."""
        self._end_bond()
        self._release()
        self.done.set()
        return super().on_shutdown(state)

    def on_error(self, state) -> TransitionCallbackReturn:
        """Release everything after a failed transition and return to unconfigured."""
        self.get_logger().error(f'error in state {state.label}: releasing the pipeline')
        self._end_bond()
        self._release()
        return SUCCESS

    def _start_bond(self) -> None:
        """Start a new bond (a new instance id) when bond.enabled; an earlier one ends first."""
        bond = self.core.cfg.bond
        if not bond.enabled:
            return
        if self._bond is not None:
            self._bond.close()
        # Nav2's nodes bond with get_name(): the name the manager lists in node_names.
        self._bond = Bond(self, self.get_name(), bond.heartbeat_period_s,
                          bond.heartbeat_timeout_s)
        self._bond.start()

    def _break_bond(self) -> None:
        """Break the bond cleanly; its "active: false" repeats from the executor for a while."""
        if self._bond is not None:
            self._bond.break_bond()

    def _end_bond(self) -> None:
        """Break the bond and release it once the manager has the break (or BOND_FLUSH_S)."""
        if self._bond is not None:
            self._bond.break_bond()
            self._bond.close(flush_s=BOND_FLUSH_S)
            self._bond = None

    def _stop_serving(self) -> None:
        if self._active:
            self.core.deactivate()
            self._active = False

    def _release(self) -> None:
        self._stop_serving()
        if self.core.pipe is not None:
            self.core.cleanup()

    def destroy_node(self) -> None:
        """Break the bond, stop the worker and the image decodes before the publishers go."""
        self._end_bond()
        self._stop_serving()
        self.core.close_decoders()
        super().destroy_node()


def main(args=None) -> int:
    """Console script ``jax_perception_lifecycle_node``; exits when shut down or signalled."""
    return run('jax_perception_lifecycle_node', JaxPerceptionLifecycleNode, args)


if __name__ == '__main__':
    sys.exit(main())
