"""The parameter schema: shipped YAML, README table, JSON schema and typed ROS parameters."""

import copy
import json

from configs import PARAMS_FILE, REPO, small_params
from jax_perception_node import schema_export
from jax_perception_node.config import (config_from_parameters, ConfigError, read_param_file,
                                        write_param_file)
from jax_perception_node.parameters import (CAMERA_KEYS, CAMERA_PREFIX, check_value,
                                            NODE_KEYS, SCHEMA, spec_for)
import jsonschema
import pytest
from ros_harness import NodeProcess
import yaml

PYTHON_TYPES = {'bool': bool, 'integer': int, 'double': float, 'string': str}


def yaml_lines():
    """Yield (dotted key, comment) for every leaf line of the shipped YAML."""
    stack = []
    for line in PARAMS_FILE.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        content, _, comment = line.partition('#')
        level = (len(line) - len(line.lstrip())) // 2
        key, _, value = content.strip().partition(':')
        del stack[level:]
        stack.append(key)
        if value.strip():
            assert stack[:2] == ['/**', 'ros__parameters'], line
            yield '.'.join(stack[2:]), comment.strip()


def test_every_shipped_key_has_the_schema_default_type_and_comment():
    flat = read_param_file(PARAMS_FILE)
    lines = dict(yaml_lines())
    assert set(lines) == set(flat)
    for key, value in flat.items():
        spec = spec_for(key)
        assert spec is not None, f'{key} is not in the schema'
        types = value if spec.ros_type.endswith('_array') else [value]
        assert all(type(v) is PYTHON_TYPES[spec.item_type] for v in types), key
        if not key.startswith('cameras.'):
            assert value == spec.default, key
        if not key.startswith('cameras.') or key.startswith('cameras.front.'):
            assert lines[key] == spec.comment, key
            assert spec.description in lines[key] and spec.unit in lines[key]
    # Every parameter is in the shipped file; the camera keys in each camera block.
    assert set(NODE_KEYS) <= set(flat)
    for name in flat['cameras.names']:
        assert {f'cameras.{name}.{leaf}' for leaf in CAMERA_KEYS} <= set(flat)


def test_schema_entries_are_consistent():
    keys = [spec.key for spec in SCHEMA]
    assert len(keys) == len(set(keys))
    for spec in SCHEMA:
        assert spec.description and spec.ros_type in (
            'bool', 'integer', 'double', 'string', 'integer_array', 'double_array',
            'string_array'), spec.key
        assert spec.static in (None, 'changes array shapes', 'compiled into the executables',
                               'fixed when the pipeline is built'), spec.key
        if spec.key.startswith(CAMERA_PREFIX):
            assert spec.default is None          # calibrations have no sensible default
            continue
        # rclpy infers the declared type from the default: it must be of the schema's type.
        items = spec.default if spec.ros_type.endswith('_array') else [spec.default]
        assert all(type(v) is PYTHON_TYPES[spec.item_type] for v in items), spec.key
        assert check_value(spec.key, spec.default) == spec.default
    assert spec_for('cameras.rear.fx').key == 'cameras.<name>.fx'
    assert spec_for('cameras.rear.nothing') is None and spec_for('grid.nothing') is None


def test_readme_table_is_the_generated_one():
    text = (REPO / 'README.md').read_text()
    begin, end = text.index(schema_export.BEGIN), text.index(schema_export.END)
    block = text[begin + len(schema_export.BEGIN):end].strip('\n')
    rows = block.splitlines()
    assert block + '\n' == schema_export.readme_table()
    assert len(rows) == 2 + len(SCHEMA)
    assert '| `accumulation.num_sweeps` | integer | `1` | sweeps | 1 .. 16 | restart' in block
    assert '| `cameras.<name>.fx` | double | required | px | > 0 | live |' in block


def test_committed_json_schema_is_the_generated_one():
    path = REPO / 'schema' / 'jax_perception.schema.json'
    committed = json.loads(path.read_text())
    assert path.read_text() == schema_export.json_text()
    jsonschema.Draft7Validator.check_schema(committed)
    node = committed['definitions']['jax_perception']
    assert committed['properties']['/**']['properties']['ros__parameters'] == {
        '$ref': '#/definitions/jax_perception'}
    assert node['properties']['grid']['properties']['resolution']['exclusiveMinimum'] == 0.0
    assert node['properties']['accumulation']['properties']['num_sweeps'] == {
        'type': 'integer', 'description': spec_for('accumulation.num_sweeps').summary
        + ' [static (changes array shapes): restart to change]',
        'minimum': 1, 'maximum': 16, 'default': 1}


def test_check_and_write_keep_the_generated_files_current(tmp_path, monkeypatch, capsys):
    assert schema_export.main(['--check']) == 0
    readme, json_file = tmp_path / 'README.md', tmp_path / 'schema' / 'x.schema.json'
    readme.write_text(f'intro\n{schema_export.BEGIN}\n| old |\n{schema_export.END}\nrest\n')
    monkeypatch.setattr(schema_export, 'README', readme)
    monkeypatch.setattr(schema_export, 'JSON_SCHEMA', json_file)
    assert schema_export.main(['--check']) == 1
    assert 'is stale' in capsys.readouterr().err
    assert schema_export.main(['--write']) == 0
    assert schema_export.main(['--check']) == 0
    assert readme.read_text() == (f'intro\n{schema_export.BEGIN}\n{schema_export.readme_table()}'
                                  f'{schema_export.END}\nrest\n')
    readme.write_text('no markers\n')
    assert schema_export.main(['--check']) == 1
    assert 'needs the markers' in capsys.readouterr().err


def validator():
    schema = json.loads((REPO / 'schema' / 'jax_perception.schema.json').read_text())
    return jsonschema.Draft7Validator(schema)


def test_shipped_yaml_validates_against_the_json_schema():
    doc = yaml.safe_load(PARAMS_FILE.read_text())
    assert list(validator().iter_errors(doc)) == []


@pytest.mark.parametrize('path, value', [
    ('cameras.front.fx', -1.0), ('grid.resolution', 0.0), ('fusion.activation', 'tanh'),
    ('lidar.rotation_xyzw', [0.0, 0.0, 1.0]), ('accumulation.num_sweeps', 17),
    ('accumulation.max_sweep_age_s', 0.0), ('grid.frame_id', ''), ('grid.x_min', 'low'),
    ('buckets', [0, 64]), ('grid.resolutoin', 0.5), ('cameras.front.skew', 0.0),
    ('cameras.front.fx', None),
])
def test_the_json_schema_and_the_config_refuse_the_same_values(path, value):
    doc = yaml.safe_load(PARAMS_FILE.read_text())
    flat = read_param_file(PARAMS_FILE)
    *parents, leaf = path.split('.')
    section = doc['/**']['ros__parameters']
    for part in parents:
        section = section[part]
    if value is None:
        del section[leaf]
        del flat[path]
    else:
        section[leaf] = value
        flat[path] = value
    assert list(validator().iter_errors(doc)), path
    with pytest.raises(ConfigError, match=f'^{path}: '):
        config_from_parameters(flat)


# -- typed ROS parameters ------------------------------------------------------------------------

@pytest.fixture
def ros_node():
    """Return a factory of in-process rclpy nodes with parameter overrides, all shut down after."""
    import rclpy
    from rclpy.node import Node
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes = []

    def make(**overrides):
        from rclpy.parameter import Parameter
        params = [Parameter(key.replace('__', '.'), value=value)
                  for key, value in overrides.items()]
        nodes.append(Node('schema_probe', context=context, parameter_overrides=params))
        return nodes[-1]
    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=context)


def test_parameters_are_declared_typed_from_the_schema(ros_node):
    from rcl_interfaces.msg import ParameterType
    from jax_perception_node.node_params import declare_parameters, read_parameters
    params = small_params(1)
    node = ros_node(**{k.replace('.', '__'): v for k, v in params.items()})
    declare_parameters(node)
    expected = {'grid.x_min': ParameterType.PARAMETER_DOUBLE,
                'buckets': ParameterType.PARAMETER_INTEGER_ARRAY,
                'cameras.names': ParameterType.PARAMETER_STRING_ARRAY,
                'cameras.front.height': ParameterType.PARAMETER_INTEGER,
                'cameras.front.translation': ParameterType.PARAMETER_DOUBLE_ARRAY,
                'accumulation.num_sweeps': ParameterType.PARAMETER_INTEGER,
                'grid.frame_id': ParameterType.PARAMETER_STRING}
    for key, kind in expected.items():
        described = node.describe_parameter(key)
        assert (described.type, described.dynamic_typing, described.read_only) == (
            kind, False, False), key
    fx = node.describe_parameter('cameras.front.fx')
    assert fx.description == 'px, focal length at feature-map resolution'
    assert fx.additional_constraints == ('type double, unit px, > 0, live: applied at once, '
                                         'without a compile')
    sweeps = node.describe_parameter('accumulation.num_sweeps').additional_constraints
    assert sweeps.startswith('type integer, unit sweeps, 1 .. 16, static (changes array shapes)')
    values = read_parameters(node)
    assert values['accumulation.max_sweep_age_s'] == 0.5        # the schema default
    assert config_from_parameters(values) == config_from_parameters(params)


@pytest.mark.parametrize('key, value, message', [
    ('grid.x_min', -8, 'grid.x_min: expected double (ROS parameters are typed: write 40.0, not '
                       '40), got -8 (integer)'),
    ('cameras.front.fx', 40, 'cameras.front.fx: expected double (ROS parameters are typed: '
                             'write 40.0, not 40), got 40 (integer)'),
    ('accumulation.num_sweeps', 2.0, 'accumulation.num_sweeps: expected integer, got 2.0 '
                                     '(double)'),
    ('lidar.translation', [0, 0, 2], 'lidar.translation: expected double[3]'),
])
def test_a_value_of_the_wrong_type_names_the_key_and_the_type(ros_node, key, value, message):
    from jax_perception_node.node_params import declare_parameters
    params = {**small_params(1), key: value}
    node = ros_node(**{k.replace('.', '__'): v for k, v in params.items()})
    with pytest.raises(ConfigError) as err:
        declare_parameters(node)
    assert str(err.value).startswith(message)


def test_the_node_exits_with_one_line_on_an_integer_for_a_double(tmp_path):
    path = tmp_path / 'int.yaml'
    write_param_file(small_params(1), path)
    path.write_text(path.read_text().replace('x_min: -8.0', 'x_min: -8'))
    node = NodeProcess(path, tmp_path / 'node.log')
    node.proc.wait(timeout=120)
    assert node.proc.returncode == 1
    assert node.log().strip() == (
        'jax_perception_node: bad parameter grid.x_min: expected double (ROS parameters are '
        'typed: write 40.0, not 40), got -8 (integer)')
    node.stop()


def test_write_param_file_writes_what_the_typed_node_reads(tmp_path):
    params = small_params(1, **{'cameras.front.fx': 8, 'grid.x_min': -8})
    given = copy.deepcopy(params)
    doc = yaml.safe_load(write_param_file(params, tmp_path / 'p.yaml').read_text())
    ros = doc['/**']['ros__parameters']
    assert ros['cameras']['front']['fx'] == 8.0 and type(ros['cameras']['front']['fx']) is float
    assert type(ros['grid']['x_min']) is float and type(ros['buckets'][0]) is int
    assert list(validator().iter_errors(doc)) == []
    assert params == given                                  # the caller's values are left alone
