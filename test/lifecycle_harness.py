"""The managed node as its own process, and a lifecycle_msgs client on a test probe."""

from pathlib import Path

from ros_harness import NodeProcess, wait_answering


class LifecycleProcess(NodeProcess):
    """jax_perception_lifecycle_node started through its console script, output to a file."""

    def __init__(self, params_file: Path, log_path: Path, extra_args=()):
        super().__init__(params_file, log_path, extra_args,
                         executable='jax_perception_lifecycle_node')


class LifecycleClient:
    """change_state / get_state of a lifecycle node, called from a Probe's node."""

    def __init__(self, probe, node='/jax_perception'):
        from lifecycle_msgs.srv import ChangeState, GetState
        self.probe = probe
        self._change = probe.node.create_client(ChangeState, f'{node}/change_state')
        self._get = probe.node.create_client(GetState, f'{node}/get_state')

    def wait_for_services(self, process=None, timeout: float = 60.0) -> None:
        """Until both services answer (the node finished its constructor): wait_answering."""
        for client in (self._get, self._change):
            self.probe.wait_for(lambda: client.service_is_ready()
                                or (process is not None and not process.alive()),
                                timeout=timeout, what=f'service {client.srv_name}')
        if process is not None and not process.alive():
            raise AssertionError(f'node exited:\n{process.log()}')
        for client in (self._get, self._change):
            wait_answering(self.probe, client, timeout)

    def state(self) -> str:
        """Return the current state's label: unconfigured, inactive, active, finalized."""
        from lifecycle_msgs.srv import GetState
        future = self._get.call_async(GetState.Request())
        self.probe.wait_for(future.done, what='get_state')
        return future.result().current_state.label

    def request(self, transition_id: int = 0, label: str = ''):
        """Send a change_state request, by id or (when given) by label; return its future."""
        from lifecycle_msgs.srv import ChangeState
        request = ChangeState.Request()
        request.transition.id, request.transition.label = transition_id, label
        return self._change.call_async(request)

    def transition(self, transition_id: int = 0, timeout: float = 120.0,
                   label: str = '') -> bool:
        """Request a lifecycle_msgs/Transition by id (or label); True when it succeeded."""
        future = self.request(transition_id, label)
        self.probe.wait_for(future.done, timeout=timeout,
                            what=f'transition {label or transition_id}')
        return future.result().success
