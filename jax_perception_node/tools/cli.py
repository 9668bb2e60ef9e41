"""
``jax-perception``: sample-bag, replay, play, record, bench, demo and train.

Each command is a function ``args -> int``; ``main`` turns user errors (bad params, missing or
unsuitable bags, outputs that cannot be written: every layer's error type, ``USER_ERRORS``) into
one line on stderr and exit code 1, never a traceback. Ctrl-C, and SIGTERM during a replay,
end with one line too (exit 130 and 143), after the replay removed its unfinished output.
"""

import argparse
import os
from pathlib import Path
import shutil
import signal
import sys

from jax_perception_node.bags.bagio import BagError, BagTopics, ODOMETRY_TOPIC, POINTCLOUD_TOPIC
from jax_perception_node.geometry.odometry import OdometryError
from jax_perception_node.geometry.transforms import TransformError
from jax_perception_node.sensors.camera import CameraInfoError, FeatureMapError
from jax_perception_node.sensors.cloud import CloudFormatError
from jax_perception_node.settings.config import default_params_file, load_config
from jax_perception_node.settings.parameters import ConfigError

from .arguments import (check_extras, check_writable, number, outputs_apart, pairs, topic_name,
                        UsageError)
from .bench.common import BenchError
from .fleet import is_bag
from .fleet_types import FleetError
from .interrupts import exit_interrupted, interrupted_import, sigterm_raises, Terminated
from .replay_files import write_json, write_pictures


# play's bounds: slower than 1000x real time or /clock below 0.01 Hz is a typo, and would
# overflow the player's sleeps; above 10 kHz /clock only costs CPU.
MIN_RATE, MIN_CLOCK_HZ, MAX_CLOCK_HZ = 1e-3, 1e-2, 1e4
MAX_DRIVE_S = 3600.0     # a sample drive or demo of an hour is already 36 000 clouds

# One exception type per layer (the decoders' too, which replay counts): one line, exit 1.
USER_ERRORS = (UsageError, ConfigError, BagError, FleetError, BenchError, CloudFormatError,
               FeatureMapError, CameraInfoError, OdometryError, TransformError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _load(args):
    return load_config(args.params or default_params_file())


def _known_sensors(args, cfg) -> None:
    """Refuse --camera-topic, --camera-info-topic, --lidar-topic for a sensor not configured."""
    for option, values, kind, names in (
            ('--camera-topic', args.camera_topic, 'camera', cfg.cameras),
            ('--camera-info-topic', args.camera_info_topic, 'camera', cfg.cameras),
            ('--lidar-topic', args.lidar_topic, 'LiDAR (lidars.names)', cfg.lidars)):
        for name in pairs(values, option):
            if name not in [c.name for c in names]:
                raise UsageError(f'{option} {name}=...: no {kind} {name!r} in the params')


def _topics(args) -> BagTopics:
    """Return the bag's input topics from --pointcloud-topic, --camera-topic and the others."""
    return BagTopics(args.pointcloud_topic, pairs(args.camera_topic, '--camera-topic'),
                     pairs(args.camera_info_topic, '--camera-info-topic'),
                     args.odometry_topic, pairs(args.lidar_topic, '--lidar-topic'))


def _replaceable_bag(out: Path) -> None:
    """Refuse to delete ``out`` for --force unless it is a bag that holds no working folder."""
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:
        raise UsageError(f'{out}: is the current folder or holds it; --force replaces a bag only')
    if not is_bag(out):
        raise UsageError(f'{out} exists and is not a bag (no metadata.yaml, not an .mcap or '
                         f'.db3 file); --force replaces a bag only')


def cmd_sample_bag(args) -> int:
    """Write the synthetic drive as an MCAP bag."""
    from .synthetic_drive import (check_pinholes, EGO_SPEED, MAX_EGO_SPEED, MAX_IMAGE_SCALE,
                                  option_variation, sensor_model, write_sample_bag)
    if not args.out:
        raise UsageError('OUT: an empty path')
    out = Path(args.out)
    outputs_apart([], {'OUT': args.out})        # never inside another bag's folder
    number(args.seconds, '--seconds', 0.0, MAX_DRIVE_S, low_open=True, unit=' s')
    number(args.speed, '--speed', 0.0, MAX_EGO_SPEED, low_open=True, unit=' m/s')
    number(args.image_scale, '--image-scale', 1, MAX_IMAGE_SCALE)
    if args.image_scale is not None and args.camera_images is None:
        raise UsageError('--image-scale: only with --camera-images (feature maps have no scale)')
    cfg = _load(args)
    if args.cameras is not None and not 0 <= args.cameras <= len(cfg.cameras):
        raise UsageError(f'--cameras {args.cameras}: the params configure {len(cfg.cameras)}')
    try:
        vary = option_variation(args.seed, cfg.lidar.translation[2], args.randomize,
                                args.mount_height, args.mount_tilt, args.body_tilt,
                                args.range_noise, args.dropout)
        lidar = sensor_model(args.lidar, args.beams, azimuth_steps=args.azimuth_steps,
                             range_noise_m=vary.pop('range_noise_m'), dropout=vary.pop('dropout'))
        check_pinholes(cfg.cameras[:args.cameras])
    except ValueError as exc:
        raise UsageError(f'sample-bag: {exc}') from None
    # Everything is checked before an old bag is deleted: a refused run loses nothing.
    if not out.exists():
        check_writable(args.out, 'OUT', folder=True)
    elif not args.force:
        raise UsageError(f'{out} exists (use --force to replace it)')
    else:
        _replaceable_bag(out)
        # A link is replaced, not what it points to.
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    try:
        with sigterm_raises():     # a bag cut short is removed, as on Ctrl-C
            summary = write_sample_bag(
                out, cfg, seconds=args.seconds, num_cameras=args.cameras, seed=args.seed,
                lidar=lidar, ego_speed=args.speed or EGO_SPEED, instant_sweep=args.instant_sweep,
                lidars=args.lidars, camera_images=args.camera_images,
                image_scale=args.image_scale or 4, **vary)
    except ValueError as exc:
        raise UsageError(f'sample-bag: {exc}') from None
    except OSError as exc:
        raise UsageError(f'{out}: cannot write: {exc.strerror or exc}') from None
    print(f'wrote {out}: ' + ', '.join(f'{k} {v}' for k, v in summary.items() if k != 'lidars'))
    return 0


def cmd_replay(args) -> int:
    """Replay a bag offline through the pipeline, or several on a Ray cluster."""
    if args.workers is not None and args.workers < 1:
        raise UsageError(f'--workers must be at least 1, got {args.workers}')
    on_ray = len(args.input) > 1 or args.workers is not None or args.ray_address is not None
    first = Path(args.input[0])
    # A folder of bags, not a bag folder that lost its metadata.yaml (one file: open_reader
    # says what that is).
    inside = [p for p in first.iterdir() if is_bag(p)] if first.is_dir() else []
    if not on_ray and not is_bag(first) and (len(inside) > 1 or any(p.is_dir() for p in inside)):
        raise UsageError(f'{first} is a folder of bags: replay them with --workers N '
                         f'(or --ray-address ADDR)')
    cfg = _load(args)
    _known_sensors(args, cfg)
    topics = _topics(args)
    if not args.out:
        raise UsageError('--out: an empty path')
    if os.path.lexists(args.out):      # a dangling link too: the replay could not end there
        raise UsageError(f'{args.out} exists, not overwriting')
    if args.json:
        check_writable(args.json, '--json', folder=False)
    if args.png:
        check_writable(args.png, '--png', folder=True)
    outputs_apart(args.input, {'--out': args.out, '--json': args.json, '--png': args.png},
                  bag='--out')
    with sigterm_raises():
        if on_ray:
            return _replay_fleet(args, cfg, topics)
        return _replay_one(args, cfg, topics)


def _replay_fleet(args, cfg, topics: BagTopics) -> int:
    from . import fleet
    if args.png:
        raise UsageError('--png needs a single bag without --workers / --ray-address')
    bags = fleet.expand_inputs(args.input)
    with fleet.cluster(args.workers, args.ray_address) as workers:
        with sigterm_raises():     # ray.init put in a handler of its own (a bare exit)
            result = fleet.replay_fleet(bags, args.out, cfg, workers, topics,
                                        progress=fleet.fleet_progress_bar())
    summary = result.summary()
    totals = summary['totals']
    for bag in summary['bags']:
        print(fleet.bag_line(bag))
    spawned = len(summary['workers'])
    idle = spawned - sum(w['ready'] for w in summary['workers'])
    print(f'{totals["bags"] - totals["failed"]}/{totals["bags"]} bags, {totals["frames"]} '
          f'frames in {totals["wall_s"]:.1f} s ({totals["frames_per_s"]:.1f} frames/s) on '
          f'{spawned} worker{"s" * (spawned != 1)}'
          f'{f" ({idle} never ready)" if idle else ""}; '
          + (f'outputs in {args.out}' if Path(args.out).is_dir() else 'nothing written'))
    if args.json:
        write_json(args.json, summary)
    return fleet.exit_code(summary)


def _replay_one(args, cfg, topics: BagTopics) -> int:
    from jax_perception_node.bags.replay import replay_bag
    from .report import progress_bar, replay_lines
    result = replay_bag(args.input[0], args.out, cfg, topics, snapshot_frames=(0, -1),
                        progress=progress_bar())
    try:
        summary = result.summary()
        for line in result.warnings():
            print(line, file=sys.stderr)
        print('\n' + '\n'.join(replay_lines(result, summary, cfg)))
        print(f'wrote {args.out}')
        if args.json:
            write_json(args.json, summary)
        if args.png:
            write_pictures(Path(args.png), result, cfg)
    except (KeyboardInterrupt, Terminated) as exc:    # the output bag is whole by now
        unwritten = ' and '.join(o for o, given in (('--json', args.json), ('--png', args.png))
                                 if given)
        cut = f'; {unwritten} may be missing or cut short' if unwritten else ''
        raise type(exc)(f'{args.out} is complete{cut}') from None
    if result.frames == 0:      # written and summarized, but "nothing served" is no success
        print('jax-perception: replay: no cloud of the bag became a frame (the rejected: lines '
              'above say why)', file=sys.stderr)
        return 1
    if result.clouds_unread:    # the output lacks frames the bag holds
        print(f'jax-perception: replay: {result.clouds_unread} clouds the bag lists could not '
              'be read (a damaged chunk?)', file=sys.stderr)
        return 1
    return 0 if result.compiles_after_warmup == 0 else 1


def cmd_play(args) -> int:
    """Publish a bag on live topics."""
    from .live import CLOCK_TOPIC, play_bag, PLAYER
    number(args.rate, '--rate', MIN_RATE)
    number(args.clock, '--clock', MIN_CLOCK_HZ, MAX_CLOCK_HZ, unit=' Hz')
    remap = pairs(args.remap, '--remap', ':=', 'FROM:=TO')   # ros2 bag play's syntax
    # Full names, so that 'clock' is seen to be /clock and two names for one topic are one.
    remap = {src: topic_name(dst, f'--remap {src}:=', PLAYER) for src, dst in remap.items()}
    for topic in args.topic or []:
        if remap.get(topic, topic) != topic:
            raise UsageError(f'--topic {topic} and --remap {topic}:={remap[topic]} both name '
                             f'{topic}: give one')
        remap[topic] = topic
    if args.clock and CLOCK_TOPIC in remap.values():
        raise UsageError(f'--clock publishes {CLOCK_TOPIC}: no bag topic may be published there '
                         f'too (--remap / --topic)')
    cfg = _load(args)
    _known_sensors(args, cfg)
    return play_bag(args.input, cfg, _topics(args), rate=args.rate, loop=args.loop,
                    restamp=args.restamp, remap=remap, clock_hz=args.clock or 0.0)


def cmd_record(args) -> int:
    """Record live topics into an MCAP bag until Ctrl-C or --seconds."""
    from .recorder import record_topics, RECORDER
    if not args.out:
        raise UsageError('OUT: an empty path')
    if Path(args.out).exists():
        raise UsageError(f'{args.out} exists, not overwriting')
    check_writable(args.out, 'OUT', folder=True)
    outputs_apart([], {'OUT': args.out})
    number(args.wait, '--wait', 0.0, unit=' s')
    number(args.seconds, '--seconds', 0.0, low_open=True, unit=' s')
    topics = [topic_name(topic, '--topic', RECORDER) for topic in args.topic or []]
    with sigterm_raises():      # a stop like Ctrl-C: the bag is closed whole
        return record_topics(args.out, topics, args.seconds, wait_s=args.wait)


def cmd_bench(args) -> int:
    """Side-by-side benchmarks, or the report of a results JSON (``--markdown``)."""
    from .bench import render, run_benchmarks
    if args.markdown:
        if not Path(args.markdown).is_file():
            problem = 'a folder, not' if Path(args.markdown).is_dir() else 'no such'
            raise UsageError(f'--markdown {args.markdown}: {problem} results file')
        return render(args.markdown, check=args.check)
    # Before minutes of benchmarking, not after: their results would be lost.
    check_writable(args.out, '--out', folder=True)
    if args.json:
        check_writable(args.json, '--json', folder=False)
        own = {Path(args.out, name).resolve() for name in ('', 'bench.md', 'bench.png', 'logs')}
        if Path(args.json).resolve() in own:
            raise UsageError(f'--json {args.json}: --out {args.out} is that or writes it; name '
                             'another file')
    parts = ('device',) if args.device else None
    return run_benchmarks(quick=args.quick, json_path=args.json, out_dir=args.out, parts=parts,
                          check=args.check)


def cmd_demo(args) -> int:
    """Node + player + recorder on the embedded sample drive."""
    from .demo import run_demo
    number(args.seconds, '--seconds', 0.0, MAX_DRIVE_S, low_open=True, unit=' s')
    check_writable(args.out, '--out', folder=True)
    try:
        with sigterm_raises():      # the node, player and recorder are stopped on the way out
            return run_demo(Path(args.out), args.params, args.seconds,
                            images=not args.feature_maps)
    except OSError as exc:      # a file where the demo writes, a full disk: one line
        raise UsageError(f'demo: {exc}') from None


def _with_topics(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options that make the ``BagTopics`` of a bag (see ``_topics``)."""
    p.add_argument('--pointcloud-topic', default=POINTCLOUD_TOPIC,
                   help='PointCloud2 topic in the bag (default: %(default)s)')
    p.add_argument('--lidar-topic', action='append', metavar='NAME=TOPIC',
                   help='PointCloud2 topic of LiDAR NAME of lidars.names in the bag (repeatable; '
                        'default: /jax_perception/input/NAME/pointcloud)')
    p.add_argument('--camera-topic', action='append', metavar='NAME=TOPIC',
                   help='topic of camera NAME in the bag: its feature maps, or with '
                        'cameras.<NAME>.input image its Image or CompressedImage (repeatable)')
    p.add_argument('--camera-info-topic', action='append', metavar='NAME=TOPIC',
                   help='CameraInfo topic of camera NAME in the bag (repeatable)')
    p.add_argument('--odometry-topic', default=ODOMETRY_TOPIC,
                   help='nav_msgs/Odometry topic in the bag: ego motion for deskew '
                        '(lidar.time_field) and accumulation (default: %(default)s)')
    return p


def build_parser(with_train: bool = True) -> argparse.ArgumentParser:
    """
    Build the jax-perception argument parser.

    ``with_train`` False leaves out the train command's arguments, whose module imports the
    training stack (equinox, optax: a second at start-up); ``main`` asks for them only when
    the command is ``train``.
    """
    parser = _Parser(prog='jax-perception', description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True, parser_class=_Parser)

    def with_params(p):
        p.add_argument('--params', help='ROS 2 param file (default: the shipped one)')
        return p

    _add_sample_bag(with_params(sub.add_parser('sample-bag', help='write the synthetic drive')))

    p = _with_topics(with_params(sub.add_parser(
        'replay', help='offline replay of a bag, or of many on a Ray cluster')))
    p.add_argument('input', nargs='+', help='a bag; several, or folders of bags, for a fleet')
    p.add_argument('--out', required=True,
                   help='output bag (MCAP); with a fleet, a new folder with one bag per input')
    p.add_argument('--workers', type=int,
                   help='fleet replay: a local Ray cluster of N one-core workers (with '
                        '--ray-address: N workers there; default: its CPUs)')
    p.add_argument('--ray-address', help='fleet replay on this running Ray cluster')
    p.add_argument('--json', help='write the summary as JSON')
    p.add_argument('--png', help='folder for BEV pictures and the latency plot')
    p.set_defaults(func=cmd_replay)

    p = _with_topics(with_params(sub.add_parser('play', help='publish a bag on live topics')))
    p.add_argument('input')
    p.add_argument('--rate', type=float, default=1.0)
    p.add_argument('--loop', action='store_true')
    p.add_argument('--restamp', action='store_true',
                   help='shift header stamps to the wall clock (age measured from publish; '
                        '--rate 1 only)')
    p.add_argument('--remap', action='append', metavar='FROM:=TO',
                   help='publish the bag topic FROM on TO (repeatable; any topic of the bag)')
    p.add_argument('--topic', action='append', metavar='TOPIC',
                   help='publish the bag topic TOPIC under its own name (repeatable; any topic '
                        'of the bag, e.g. its ground truth; a node input named so then leaves '
                        "the node's input name)")
    p.add_argument('--clock', type=float, nargs='?', const=40.0, metavar='HZ',
                   help='publish /clock from the bag time, HZ times a second (default 40)')
    p.set_defaults(func=cmd_play)

    p = sub.add_parser('record', help='record live topics into an MCAP bag')
    p.add_argument('out')
    p.add_argument('--topic', action='append', metavar='TOPIC',
                   help='topic to record (repeatable; default: the BEV features, the latency '
                        'record and /diagnostics)')
    p.add_argument('--seconds', type=float, default=None, help='stop after this long')
    p.add_argument('--wait', type=float, default=None, metavar='SECONDS',
                   help='give up when a topic has no publisher after this long (default: '
                        'wait until every topic has one)')
    p.set_defaults(func=cmd_record)

    _add_bench(sub.add_parser('bench', help='side-by-side benchmarks'))

    p = with_params(sub.add_parser('demo', help='the main job on the embedded sample drive'))
    p.add_argument('--out', default='demo_out', help='its folder (default: %(default)s)')
    p.add_argument('--seconds', type=float, default=8.0,
                   help='the sample drive played, at most 3600 (default: %(default)s)')
    p.add_argument('--feature-maps', action='store_true', help='the cameras as the parameters '
                   'say (default: JPEG images, encoded by the learned encoder)')
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser('train', help='train the reference head on sample drives (seeds >= 100)')
    if with_train:
        from . import train
        train.add_arguments(p)
        p.set_defaults(func=train.cmd_train)
    return parser


def _add_sample_bag(p: argparse.ArgumentParser) -> None:
    p.add_argument('out')
    p.add_argument('--seconds', type=float, default=8.0)
    p.add_argument('--cameras', type=int, default=None, help='first N configured cameras')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--force', action='store_true', help='replace OUT if it exists')
    p.add_argument('--lidar', metavar='PRESET', help='VLP-16, HDL-32E, HDL-64E, OS1-128, Pandar64')
    p.add_argument('--lidars', choices=('one', 'three'), default='one', help='three: top+sides')
    p.add_argument('--speed', type=float, metavar='M/S', help='ego speed, <= 25 m/s (10)')
    p.add_argument('--instant-sweep', action='store_true', help='all columns fire at the stamp')
    p.add_argument('--beams', type=int, help="LiDAR beams, spread over the preset's field (64)")
    p.add_argument('--azimuth-steps', type=int, help='LiDAR columns per turn (default 2048)')
    p.add_argument('--range-noise', type=float, help='LiDAR range noise sigma, m (0.02)')
    p.add_argument('--dropout', type=float, help='probability a return is lost (0.02)')
    p.add_argument('--mount-height', type=float, metavar='M', help="top LiDAR's z, m (params)")
    p.add_argument('--mount-tilt', metavar='PITCH,ROLL', help='extra LiDAR pitch, roll, deg')
    p.add_argument('--body-tilt', metavar='PITCH,ROLL', help='body on the road, deg, not in TF')
    p.add_argument('--randomize', action='store_true',
                   help='draw the 5 options above, unless given, from --seed')
    p.add_argument('--camera-images', choices=('raw', 'jpeg'),
                   help='publish the camera images (rgb8 Image, JPEG CompressedImage), not maps')
    p.add_argument('--image-scale', type=int, metavar='K',
                   help='with --camera-images: image size / feature-map size, 1..8 (4)')
    p.set_defaults(func=cmd_sample_bag)


def _add_bench(p: argparse.ArgumentParser) -> None:
    """Add the bench command's arguments."""
    p.add_argument('--quick', action='store_true', help='shorter runs (a few minutes)')
    p.add_argument('--json', help='results file (default: OUT/bench.json)')
    p.add_argument('--out', default='bench_out', help='folder for the table and plot')
    p.add_argument('--check', action='store_true',
                   help='exit 1 when a measured target is missed (and say which)')
    p.add_argument('--device', action='store_true',
                   help='only the accelerator rows: the core on jax.devices() against PyTorch '
                        'on the same device (runs on the CPU too)')
    p.add_argument('--markdown', metavar='JSON',
                   help='print the report of a results file instead of running (with --check: '
                        'check its targets)')
    p.set_defaults(func=cmd_bench)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jax-perception`` console script."""
    script, argv = argv is None, sys.argv[1:] if argv is None else list(argv)
    try:
        check_extras(argv)      # before the work: a demo's or a replay's ImportError at its end
        args = build_parser(with_train=argv[:1] == ['train']).parse_args(argv)
        if getattr(args, 'params', None) == '':     # not the shipped file by accident
            raise UsageError('--params: an empty path')
        return args.func(args)
    except USER_ERRORS as exc:
        print(f'jax-perception: {exc}', file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:     # its text, if any, says what was left written
        return exit_interrupted(': '.join(['interrupted', *exc.args]), 130, script)
    except Terminated as exc:
        return exit_interrupted(': '.join(['terminated (SIGTERM)', *exc.args]),
                                128 + signal.SIGTERM, script)
    except ImportError as exc:
        # rclpy's native module, interrupted while it loads, says it is missing instead.
        if not interrupted_import(exc):
            raise
        return exit_interrupted('interrupted', 130, script)


if __name__ == '__main__':
    sys.exit(main())
