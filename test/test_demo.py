"""The demo end to end on a short drive: node process, player process, recorder, report."""

from jax_perception_node.cli import main


def test_demo_runs_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / 'demo'
    assert main(['demo', '--out', str(out), '--seconds', '1.5']) == 0
    printed = capsys.readouterr().out
    for name in ('report.md', 'bev.png', 'latency.png', 'recording/metadata.yaml'):
        assert (out / name).exists(), name
    report = (out / 'report.md').read_text()
    assert report in printed
    rows = dict(line.strip('|').split('|')[:2] for line in report.splitlines()
                if line.startswith('| ') and line.count('|') == 3)
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows['LiDAR frames in the bag'] == '15'
    assert int(rows['frames out (bev_features)']) >= 12
    assert rows['compiles after warm-up'] == '0'
    assert int(rows['frames received by the node']) == (
        int(rows['frames out (bev_features)']) + int(rows['dropped (latest wins)'])
        + int(rows['rejected']))
