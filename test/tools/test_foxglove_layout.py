"""foxglove/jax_perception.layout.json: a Foxglove layout of the node's topics."""

import json

from configs import REPO
from jax_perception_node.bags import topics

LAYOUT = REPO / 'foxglove' / 'jax_perception.layout.json'


def panel_ids(tree) -> list[str]:
    """Return the panel ids of a layout tree (a panel id, or a split of two subtrees)."""
    if isinstance(tree, str):
        return [tree]
    assert set(tree) >= {'first', 'second', 'direction'}, tree
    assert tree['direction'] in ('row', 'column')
    return panel_ids(tree['first']) + panel_ids(tree['second'])


def shown_topics(config: dict) -> dict[str, set[str]]:
    """Return panel kind -> the topics its panels show (3D topics, image, plot paths)."""
    shown = {}
    for panel_id, panel in config['configById'].items():
        kind = panel_id.split('!')[0]
        names = shown.setdefault(kind, set())
        names.update(panel.get('topics', {}))
        if 'imageMode' in panel:
            names.add(panel['imageMode']['imageTopic'])
        # A message path: the topic, then '.field' (Foxglove's path syntax).
        names.update(path['value'].split('.')[0] for path in panel.get('paths', []))
    return shown


def test_layout_is_a_foxglove_layout_of_its_panels():
    config = json.loads(LAYOUT.read_text())
    assert set(config) >= {'configById', 'layout', 'globalVariables', 'userNodes',
                           'playbackConfig'}
    ids = panel_ids(config['layout'])
    assert sorted(ids) == sorted(config['configById']), 'every panel placed exactly once'
    assert {i.split('!')[0] for i in ids} == {'3D', 'Image', 'Plot'}


def test_layout_shows_the_node_outputs_and_only_topics_it_publishes():
    shown = shown_topics(json.loads(LAYOUT.read_text()))
    assert shown['3D'] == {topics.POINTCLOUD_TOPIC, topics.GRID_MAP_TOPIC,
                           topics.OBJECTS_MARKERS_TOPIC}
    assert shown['Image'] == {topics.IMAGE_TOPIC}
    assert shown['Plot'] == {topics.PROCESSING_TIME_TOPIC, topics.CYCLIC_TIME_TOPIC,
                             topics.PIPELINE_LATENCY_TOPIC}
    everything = set().union(*shown.values())
    # The cloud is the node's input, shown beside its outputs; all else the node publishes.
    assert everything - {topics.POINTCLOUD_TOPIC} <= set(topics.PUBLISHED_TOPICS)
