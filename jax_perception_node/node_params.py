"""ROS parameter declaration and reading for the node (plain and managed): rclpy side only."""

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.parameter import Parameter

from .config import CAMERA_PARAMETERS, parameter_type, PARAMETERS
from .live_params import plain, static_reason


def _descriptor(key: str, description: str, dynamic: bool) -> ParameterDescriptor:
    reason = static_reason(key)
    when = (f'static ({reason}): read at configure, a restart is needed to change it'
            if reason else 'live: applied at once, without a compile')
    # Types are checked by config_from_parameters, which names the key; static typing would
    # reject `fx: 40` for a double with a less helpful message.
    return ParameterDescriptor(description=description, dynamic_typing=dynamic,
                               additional_constraints=f'type {parameter_type(key)}, {when}')


def _value(node, key: str):
    try:
        return plain(node.get_parameter(key).value)
    except ParameterUninitializedException:    # declared by type only, never given a value
        return None


def _declare(node, key: str, default, description: str) -> None:
    if node.has_parameter(key):
        return
    if default == []:
        # An empty list has no type of its own; a camera list is strings.
        descriptor = _descriptor(key, description, dynamic=False)
        default = Parameter.Type.STRING_ARRAY
    else:
        descriptor = _descriptor(key, description, dynamic=True)
    node.declare_parameter(key, default, descriptor)


def declare_parameters(node) -> None:
    """Declare every parameter with its description, the camera blocks of cameras.names too."""
    for key, (default, text) in PARAMETERS.items():
        _declare(node, key, default, text)
    read_parameters(node)


def read_parameters(node) -> dict:
    """
    Return the flat parameter values (declaring any camera block not declared yet).

    Unset camera keys are left out, so the config layer reports them as required by name.
    """
    names = _value(node, 'cameras.names') or []
    keys = list(PARAMETERS)
    for camera in names:
        for key, text in CAMERA_PARAMETERS.items():
            name = f'cameras.{camera}.{key}'
            _declare(node, name, None, text)
            keys.append(name)
    values = {key: _value(node, key) for key in keys}
    return {key: value for key, value in values.items() if value is not None}
