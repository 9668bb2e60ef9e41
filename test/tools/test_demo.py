"""The demo end to end on a short drive: node process, player process, recorder, report."""

from configs import PARAMS_FILE
from jax_perception_node.config import read_param_file, write_param_file
from jax_perception_node.tools.cli import main


def test_demo_runs_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / 'demo'
    # The shipped parameters with a store of the test's own: tests never write to ~/.cache.
    params = write_param_file(dict(read_param_file(PARAMS_FILE),
                                   compilation_cache_dir=str(tmp_path / 'xla')),
                              tmp_path / 'params.yaml')
    assert main(['demo', '--out', str(out), '--seconds', '1.5', '--params', str(params)]) == 0
    printed = capsys.readouterr().out
    for name in ('report.md', 'bev.png', 'latency.png', 'recording/metadata.yaml'):
        assert (out / name).exists(), name
    assert any((tmp_path / 'xla').iterdir())
    report = (out / 'report.md').read_text()
    assert report in printed
    rows = dict(line.strip('|').split('|')[:2] for line in report.splitlines()
                if line.startswith('| ') and line.count('|') == 3)
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows['LiDAR frames in the bag'] == '15'
    assert rows['compiles after warm-up'] == '0'
    # Accounting, not a rate: played in real time on a shared machine, the node may drop
    # frames (latest wins), but every frame it received is an output, a drop or a rejection.
    received, out_frames = int(rows['frames received by the node']), int(
        rows['frames out (bev_features)'])
    assert 1 <= out_frames <= received <= 15
    assert received == out_frames + int(rows['dropped (latest wins)']) + int(rows['rejected'])
    assert rows['rejected'] == '0'          # the sample drive holds no malformed cloud
