"""The CLI's checks of option values: outputs kept off inputs and bags, numbers, topic names."""

import math

from jax_perception_node.tools.arguments import number, outputs_apart, topic_name, UsageError
import pytest


@pytest.fixture
def drives(tmp_path):
    """Return a plain folder holding two bag folders (metadata.yaml) and a bare .mcap."""
    for name in ('d0', 'd1'):
        (tmp_path / 'drives' / name).mkdir(parents=True)
        (tmp_path / 'drives' / name / 'metadata.yaml').write_text('rosbag2_bagfile_information:\n')
    (tmp_path / 'drives' / 'bare.mcap').write_bytes(b'')
    return tmp_path / 'drives'


def test_harmless_layouts_are_accepted(drives, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for inputs, outputs in (
            ([drives], {'--out': drives / 'replayed'}),              # beside the bags
            ([drives / 'd0'], {'--out': tmp_path / 'o', '--png': tmp_path / 'pics',
                               '--json': tmp_path / 'pics' / 'summary.json'}),
            ([drives / 'bare.mcap'], {'--out': 'o', '--png': '.'}),   # a folder holding it
            ([drives / 'd0'], {'--out': 'o', '--json': None})):
        outputs_apart([str(p) for p in inputs], {k: v and str(v) for k, v in outputs.items()},
                      bag='--out')


@pytest.mark.parametrize('inputs, outputs, message', [
    (['{d}/d0'], {'--out': '{d}/d0'}, '--out {d}/d0: would write over the input {d}/d0'),
    (['{d}/bare.mcap'], {'--json': '{d}/bare.mcap'}, 'would write over the input'),
    (['{d}/d0'], {'--json': '{d}/d0/x.json'}, '--json {d}/d0/x.json: would write inside the '
                                              'bag {d}/d0'),
    (['{d}/d0'], {'--json': '{d}/d1/x.json'}, 'would write inside the bag {d}/d1'),
    (['{d}'], {'--out': '{d}/d1/deeper/o'}, 'would write inside the bag {d}/d1'),
    (['{d}/d0'], {'--out': '{t}/o', '--json': '{t}/o'},
     '--out {t}/o and --json {t}/o: one would write over the other'),
    (['{d}/d0'], {'--out': '{t}/o', '--png': '{t}/o/pics'},
     '--png {t}/o/pics: would write inside the output bag --out {t}/o'),
])
def test_outputs_on_inputs_bags_or_each_other_are_refused(drives, tmp_path, inputs, outputs,
                                                          message):
    def fill(text):
        return text.format(d=drives, t=tmp_path)
    with pytest.raises(UsageError) as refused:
        outputs_apart([fill(i) for i in inputs], {k: fill(v) for k, v in outputs.items()},
                      bag='--out')
    assert fill(message) in str(refused.value)


def test_a_link_to_an_input_is_the_input(drives, tmp_path):
    (tmp_path / 'link.mcap').symlink_to(drives / 'bare.mcap')
    with pytest.raises(UsageError, match='would write over the input'):
        outputs_apart([str(drives / 'bare.mcap')], {'--json': str(tmp_path / 'link.mcap')})


def test_numbers_must_be_finite_and_in_range():
    assert number(None, '--x', 0.0) is None
    assert number(0.0, '--x', 0.0) == 0.0 and number(5.0, '--x', 0.0, 5.0) == 5.0
    for value, low_open in ((math.nan, False), (math.inf, False), (-1.0, False), (0.0, True),
                            (5.5, False)):
        with pytest.raises(UsageError, match='--x must be a number'):
            number(value, '--x', 0.0, 5.0, low_open=low_open)


def test_topic_names_are_expanded_in_the_root_namespace():
    assert topic_name('clock', '--remap') == '/clock'
    assert topic_name('/a/b', '--remap') == '/a/b'
    assert topic_name('~/x', '--remap', node='jax_perception_player') == \
        '/jax_perception_player/x'
    for bad in ('bad name!', '/a/', '', '/1a'):
        with pytest.raises(UsageError, match='not a valid ROS topic name'):
            topic_name(bad, '--remap')
