"""
ROS parameter declaration and reading for the node (plain and managed): rclpy side only.

Every parameter is declared with its ROS type from the schema (parameters.py), never with
dynamic typing, so ``ros2 param set`` of the wrong type is refused by rclpy and a parameter
file with ``fx: 40`` for a double stops start-up with a :class:`ConfigError` naming the key.
Static keys are not read-only: the managed node may take new values while unconfigured, and
the parameter callback refuses them while a pipeline runs, with the reason.

The schema's bounds become the descriptors' ``FloatingPointRange`` / ``IntegerRange`` (both
inclusive, as the schema's bounds are), so rqt and Foxglove show them and rclpy refuses an
out-of-range ``ros2 param set`` itself. ROS ranges apply to scalars only: an array's item bounds
are in its description and checked by the config layer.
"""

import re

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterValue)
from rcl_interfaces.srv import GetParameters
from rclpy.exceptions import (InvalidParameterTypeException, InvalidParameterValueException,
                              ParameterNotDeclaredException, ParameterUninitializedException)
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, ReliabilityPolicy

from ..settings.live_params import plain
from ..settings.param_checks import check_value, ros_type_error, unknown_key
from ..settings.param_file import read_param_file, read_value
from ..settings.parameters import (camera_keys, ConfigError, is_camera_name, is_foreign,
                                   lidar_keys, NODE_KEYS, ParamSpec, spec_for, STARTED)
from ..settings.rcl_values import rcl_type

ROS_TYPES = {
    'bool': Parameter.Type.BOOL, 'integer': Parameter.Type.INTEGER,
    'double': Parameter.Type.DOUBLE, 'string': Parameter.Type.STRING,
    'integer_array': Parameter.Type.INTEGER_ARRAY, 'double_array': Parameter.Type.DOUBLE_ARRAY,
    'string_array': Parameter.Type.STRING_ARRAY,
}
_ARRAY_TYPES = frozenset({Parameter.Type.BOOL_ARRAY, Parameter.Type.BYTE_ARRAY,
                          Parameter.Type.INTEGER_ARRAY, Parameter.Type.DOUBLE_ARRAY,
                          Parameter.Type.STRING_ARRAY})
# rclpy's InvalidParameterTypeException says "... to '40' of type 'INTEGER', expecting ...".
_GIVEN = re.compile(r"to '(?P<value>.*)' of type '(?P<type>\w+)'")
# rclpy's InvalidParameterValueException says "Invalid parameter value (1e+300) ... Reason: ...".
_REFUSED = re.compile(r'value \((?P<value>.*)\) for parameter\. Reason: (?P<reason>.*)', re.S)
QOS_OVERRIDES = 'qos_overrides.'     # rclpy's parameters of a subscription's QoS (sensor_inputs)
_MAX_DEPTH = 2 ** 31 - 1    # rmw_qos_profile_t's depth, as rclpy converts it
# The enumerated policies a subscription takes overrides of: the values rclpy reads them from.
_QOS_CHOICES = {policy: [value.name.lower() for value in kind if value.name != 'UNKNOWN']
                for policy, kind in (('history', HistoryPolicy),
                                     ('reliability', ReliabilityPolicy),
                                     ('durability', DurabilityPolicy))}


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """Return the typed descriptor: description, and type, unit, bounds and live/static as text."""
    constraints = [f'type {spec.type_label}']
    if spec.unit:
        constraints.append(f'unit {spec.unit}')
    if spec.bounds_text():
        constraints.append(spec.bounds_text())
    if spec.static == STARTED:
        constraints.append(f'read-only ({spec.static}): set it when the node starts')
    else:
        constraints.append(f'static ({spec.static}): read at configure, a restart is needed to '
                           f'change it' if spec.static else
                           'live: applied at once, without a compile')
    # Read-only: the managed node takes static keys while unconfigured, not this one.
    described = ParameterDescriptor(type=ROS_TYPES[spec.ros_type].value,
                                    description=spec.summary,
                                    additional_constraints=', '.join(constraints),
                                    read_only=spec.static == STARTED)
    bounded = spec.minimum is not None and spec.maximum is not None
    if bounded and spec.ros_type == 'double':
        described.floating_point_range = [FloatingPointRange(
            from_value=float(spec.minimum), to_value=float(spec.maximum), step=0.0)]
    elif bounded and spec.ros_type == 'integer':
        described.integer_range = [IntegerRange(
            from_value=int(spec.minimum), to_value=int(spec.maximum), step=0)]
    elif bounded:     # arrays: ROS ranges do not apply, say the item bounds in the description
        described.description += f'; each item {spec.bounds_text()}'
    return described


def _refused(key: str, spec: ParamSpec, exc: InvalidParameterValueException) -> ConfigError:
    """Return the config layer's message for an override the descriptor's range refused."""
    match = _REFUSED.search(str(exc))
    if match is None:
        return ConfigError(f'{key}: {exc}')
    try:
        check_value(key, (int if spec.ros_type == 'integer' else float)(match['value']))
    except ConfigError as error:      # names the key and the bound, as a params file does
        return error
    except ValueError:
        pass
    return ConfigError(f'{key}: {match["reason"].strip()}')


def _declare(node, key: str) -> None:
    if node.has_parameter(key):
        return
    spec = spec_for(key)
    default = spec.default
    overrides = _overrides(node)
    given = overrides.get(key)
    if (given is not None and given.type_ in _ARRAY_TYPES and len(given.value) == 0
            and spec.ros_type.endswith('_array')):
        # rclpy types an empty list of a Parameter made in Python as a byte array, whatever
        # the key: made typeless, as rcl reads a params file's [], it is the key's empty
        # array (``_value``), as a live set of [] is (``_typed_empty_arrays``).
        overrides[key] = Parameter(key)
    # No default (camera keys) or an empty list (no element type): declare by type alone.
    value = ROS_TYPES[spec.ros_type] if default is None or default == [] else default
    try:
        declared = node.declare_parameter(key, value, descriptor(spec))
    except InvalidParameterTypeException as exc:
        given = _GIVEN.search(str(exc))
        text = (f"{given['value']} ({given['type'].lower()})" if given
                else 'a value of another type')
        raise ConfigError(ros_type_error(key, text)) from None
    except InvalidParameterValueException as exc:     # out of the descriptor's range
        raise _refused(key, spec, exc) from None
    if (declared.type_ == Parameter.Type.NOT_SET and spec.ros_type.endswith('_array')
            and (default == [] or key in overrides)):
        # The empty list by default, or rcl's typeless `[]` (a params file, -p key:=[]): set
        # as the key's empty array. Left unset, GetParameters answers nothing for a request
        # naming it, so `ros2 param dump` (one request for every name) showed no parameter.
        node.set_parameters([Parameter(key, ROS_TYPES[spec.ros_type], [])])


def _overrides(node) -> dict:
    """Return the node's parameter overrides (params files and -p), by name."""
    # rclpy keeps them in this attribute since Dashing; it has no public accessor.
    return getattr(node, '_parameter_overrides', {})


def _value(node, key: str):
    try:
        return plain(node.get_parameter(key).value)
    except ParameterUninitializedException:    # no default (a camera's fx), never given
        return None


def _typed_empty_arrays(node):
    """Return a pre-set callback giving an empty array the declared array type of its key."""
    def retype(params: list) -> list:
        # `ros2 param set ... "[]"` sends BOOL_ARRAY (every item of [] is a bool), which a
        # statically typed STRING_ARRAY or DOUBLE_ARRAY key would refuse.
        out = []
        for param in params:
            if (param.type_ in _ARRAY_TYPES and len(param.value) == 0
                    and node.has_parameter(param.name)):
                declared = Parameter.Type(node.describe_parameter(param.name).type)
                if declared in _ARRAY_TYPES:
                    param = Parameter(param.name, declared, [])
            out.append(param)
        return out
    return retype


def declare_parameters(node) -> None:
    """
    Declare every parameter with its type and description, and the camera and LiDAR blocks.

    The blocks of ``cameras.names`` and ``lidars.names`` (``cameras.<name>.*``,
    ``lidars.<name>.*``) are declared for the names the overrides give. A set of an empty list
    of any array type is given the key's array type.

    Raises :class:`ConfigError` for a value of the wrong type in the parameter overrides, or an
    override of a key the node does not have (a misspelt key, or a block of a camera or LiDAR
    not named): ``grid.resoluton: unknown parameter``, as the params file reader says. Where
    the command line sets ``cameras.names`` or ``lidars.names`` (``-p cameras.names:=[]`` or
    ``:=[front]``, ``command_line_overrides``), the params file's blocks of the names it leaves
    out are left unread with one WARN instead.
    """
    for key in NODE_KEYS:
        _declare(node, key)
    read_parameters(node)
    undeclared = sorted(name for name in _overrides(node) if not node.has_parameter(name))
    unknown = [name for name in undeclared if not is_foreign(name)]
    # `-p cameras.names:=[front]` beside a file of four cameras: the file's other blocks are
    # left unread (said once), not refused as a block of a name left out of the file's own
    # list is (a typo there).
    given = {key.split('.')[0] for key, param in _overrides(node).items()
             if isinstance(param, CommandLineList) and key in _BLOCKS}
    left = [name for name in unknown if name.split('.')[0] in given
            and name.count('.') == 2 and spec_for(name) is not None]
    if left:
        blocks = sorted({'.'.join(name.split('.')[:2]) for name in left})
        lists = ', '.join(f'{group}.names {_value(node, f"{group}.names") or []}'
                          for group in sorted(given))
        node.get_logger().warning(f'{lists} from the command line: the blocks '
                                  f'{", ".join(blocks)} of the params file are left unread')
        unknown = [name for name in unknown if name not in left]
    if unknown:
        raise unknown_key(unknown[0], {group: _value(node, f'{group}.names') or []
                                       for group in ('cameras', 'lidars')})
    # qos_overrides.* are declared by rclpy as the subscriptions are made (sensor_inputs).
    check_qos_overrides({name: _overrides(node)[name].value for name in undeclared})
    foreign = [name for name in undeclared
               if not name.startswith(QOS_OVERRIDES) and name not in left]
    if foreign:
        node.get_logger().warning(
            "parameters of no group of this node, ignored (another node's, from a /** "
            f'section?): {", ".join(foreign)}')
    node.add_pre_set_parameters_callback(_typed_empty_arrays(node))
    node.add_post_set_parameters_callback(_blocks_follow_names(node))
    _answer_unset_parameters(node)


_BLOCKS = {'cameras.names': camera_keys, 'lidars.names': lidar_keys}


def _blocks_follow_names(node):
    """
    Return a post-set callback declaring the blocks of names newly set in ``*.names``.

    ``cameras.names`` and ``lidars.names`` change only while the managed node is unconfigured
    (the set callback refuses them otherwise): a new name's keys are then settable at once, as
    a block given in the file is, and a name taken out loses its block (a ``ros2 param dump``
    of it would be a file the node refuses).
    """
    def follow(params: list) -> None:
        named = [p for p in params if p.name in _BLOCKS]
        for param in named:
            keys, kept = _BLOCKS[param.name], set(param.value or [])
            for name in node.list_parameters([param.name.split('.')[0]], 0).names:
                block = name.split('.')[1]
                if block not in kept and name in keys(block):
                    node.undeclare_parameter(name)
        if named:
            read_parameters(node)      # declares the new names' blocks
    return follow


def _answer_unset_parameters(node) -> None:
    """
    Make GetParameters answer PARAMETER_NOT_SET for a declared key without a value.

    rclpy answers an empty list to a request that names one (a camera's fx not yet given to
    the managed node), and ``ros2 param dump``, rqt and Foxglove ask for every name at once:
    they showed no parameter at all just when an operator looks for the missing one. A name
    that is not declared still gets rclpy's empty answer.
    """
    def answer(request, response):
        for name in request.names:
            try:
                value = node.get_parameter(name).get_parameter_value()
            except ParameterUninitializedException:
                value = ParameterValue()        # type PARAMETER_NOT_SET
            except ParameterNotDeclaredException:
                response.values = []
                return response
            response.values.append(value)
        return response
    for service in node.services:
        if service.srv_type is GetParameters:
            service.callback = answer


def check_qos_overrides(values: dict) -> None:
    """
    Raise ConfigError for a subscription's QoS override rclpy could not apply, naming it.

    ``values``: parameter values by name; ``qos_overrides.<topic>.subscription.<policy>`` ones
    are checked (history, reliability, durability: one of rclpy's names; depth: an integer
    >= 0, 0 the middleware's default). rclpy would raise when the subscription is made, a
    traceback and a failed activation where this is one line at start-up.
    """
    for name, value in values.items():
        if not name.startswith(QOS_OVERRIDES) or name.split('.')[-2] != 'subscription':
            continue
        policy = name.rsplit('.', 1)[1]
        if policy == 'depth' and (type(value) is not int or not 0 <= value <= _MAX_DEPTH):
            raise ConfigError(f'{name}: must be an integer from 0 to {_MAX_DEPTH} (messages '
                              f'kept), got {value!r}')
        choices = _QOS_CHOICES.get(policy)
        if choices is not None and not (isinstance(value, str) and value.lower() in choices):
            raise ConfigError(f'{name}: must be one of {choices}, got {value!r}')


def qos_overrides_unapplied(node, later: tuple[str, ...] = ()) -> str | None:
    """
    Return a line naming the ``qos_overrides.*`` overrides no subscription took; None if none.

    Called once subscribed: each subscription declares its topic's (the resolved name)
    history, depth, reliability and durability. An override of another topic (misspelt, not
    remapped as given, an output: the publishers take none) or policy stays undeclared, and
    rclpy would ignore it without a word. ``later``: topics the node may still subscribe
    (/tf once ``extrinsics.source`` becomes tf), whose overrides are not named.
    """
    waiting = tuple(f'{QOS_OVERRIDES}{topic}.' for topic in later)
    names = sorted(name for name in _overrides(node) if name.startswith(QOS_OVERRIDES)
                   and not node.has_parameter(name) and not name.startswith(waiting))
    return (f'QoS overrides not applied (no subscription of this node has that topic and '
            f'policy): {", ".join(names)}') if names else None


def command_line_overrides(args: list[str]) -> list[Parameter]:
    """
    Return an override of each key of the node whose last ``-p`` in ``args`` rcl would mistake.

    Raises ConfigError for a ``-p`` value of another ROS type than its key's, as rcl types it
    (``grid.resolution:=0,25`` a string, ``head.max_objects:=100.0`` a double): where a params
    file sets the key, rcl keeps both values and rclpy takes the first of bool, integer,
    double, string, so a ``-p`` of a later type was dropped without a word for the file's
    value (without a file, rclpy refuses it in the same words). The overrides are of two
    kinds, both :class:`CommandLineList`. A list key given ``[]``, NOT_SET: rcl gives
    ``[]`` no type, and where a params file sets the key it keeps the file's list (``-p
    cameras.names:=[]`` beside the shipped file left the four cameras); given to the node's
    constructor (which wins over rcl's overrides), NOT_SET declares the key's typed empty
    array, as ``[]`` does where no file sets it. And ``cameras.names`` or ``lidars.names``
    given names, with the value rcl takes too: marked so that the params file's blocks of the
    names left out are not refused as a typo (``declare_parameters``). rcl applies ``-p`` and
    ``--params-file`` in their order: a later file that sets the key wins over its ``-p``
    (launch_ros passes a parent's ``SetParameter`` as ``-p`` before the node's file).
    ``args``: the process's (its ROS arguments between ``--ros-args`` and ``--``).
    """
    last, ros = {}, False
    for flag, value in zip(args, args[1:] + ['']):
        ros = flag == '--ros-args' or (ros and flag != '--')
        key, given, text = value.partition(':=')
        if ros and flag in ('-p', '--param') and given:
            last[key] = text        # the last -p of a key wins, as in rcl
        elif ros and flag == '--params-file' and last:
            try:
                for key in read_param_file(value):
                    last.pop(key, None)
            except ConfigError:
                pass        # rcl refuses that file itself, in its own words
    out = []
    for key, text in last.items():
        spec = spec_for(key)
        typed = None if spec is None else rcl_type(text)
        if typed is not None and typed != spec.ros_type:
            raise ConfigError(ros_type_error(key, f'{text} ({typed})'))
        if text.replace(' ', '') == '[]' and spec and spec.ros_type.endswith('_array'):
            out.append(CommandLineList(key))
        elif key in _BLOCKS and typed == 'string_array':
            out.append(CommandLineList(key, Parameter.Type.STRING_ARRAY, read_value(text)))
    return out


class CommandLineList(Parameter):
    """An override from ``command_line_overrides``: a list key the command line set."""


def read_parameters(node) -> dict:
    """
    Return the flat parameter values (declaring any camera or LiDAR block not declared yet).

    Unset keys are left out: the config layer fills defaults and reports the block keys without
    a default (poses, intrinsics) as required.
    """
    keys = list(NODE_KEYS)
    for names, block_keys in _BLOCKS.items():
        for name in _value(node, names) or []:
            if not is_camera_name(name):
                continue    # not a valid parameter name part: the config layer names the problem
            for key in block_keys(name):
                _declare(node, key)
                keys.append(key)
    values = {key: _value(node, key) for key in keys}
    return {key: value for key, value in values.items() if value is not None}


def refusal_reason(changes: dict, exc: ConfigError) -> str:
    """
    Return the reason a live parameter set is refused: ``exc``'s, led by the keys set.

    A reason that names no key of the set (a camera's new ``fx`` refused because another
    camera's samples would not fit the lift) is led by the keys, so the operator reads what
    was refused before why.
    """
    reason = str(exc)
    if any(reason.startswith(key) for key in changes):
        return reason
    return f'{", ".join(sorted(changes))}: {reason}'
