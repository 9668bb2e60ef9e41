"""
The one-command demo: sample drive -> player -> node (own process) -> recorder -> report.

Everything talks over real DDS on loopback (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) in a
domain of its own, so two demos on one machine do not see each other.

With a head (the shipped parameters have one), the player also publishes the drive's ground
truth (``/ground_truth/objects``, restamped like the LiDAR), the recorder keeps it beside the
node's ``~/output/objects``, and the report scores them (``detection_summary``, paired by
stamp): one class's AP at 2 m as before, and per class the mean of its APs at 0.5, 1, 2 and 4 m
with the mAP over the classes with ground truth. The classes scored are the class ids seen on
either topic (``OBJECT_CLASSES`` order first): a ground-truth class the node never published is
scored too (AP 0). The BEV picture draws both, objects in their class's colour, named in its
caption.
"""

from collections import Counter
import hashlib
from pathlib import Path
import re
import shutil
import subprocess
import time


from jax_perception_node.bags import bagio
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.frames.latency import percentiles, STAGES
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.outputs.objects import GROUND_TRUTH_TOPIC
from jax_perception_node.settings.config import default_params_file, load_config
from jax_perception_node.settings.param_file import read_param_file, write_param_file

from .arguments import UsageError
from .processes import console_script, local_ros_env, stop_process

# The learned encoder, whose shipped weights were trained end to end with a shipped head.
IMAGE_ENCODER = 'jax_perception_node.detection.encoders.learned:cnn'
RECORDED_TOPICS = {bagio.FEATURES_TOPIC: bagio.IMAGE_TYPE,
                   bagio.LATENCY_TOPIC: bagio.DIAGNOSTICS_TYPE,
                   bagio.DIAGNOSTICS_TOPIC: bagio.DIAGNOSTICS_TYPE}


def recorded_topics(cfg) -> dict[str, str]:
    """
    Return topic -> msgtype of what the demo records for ``cfg``.

    With a head also its objects (of ``output.objects_type``) and the ground truth played
    beside them.
    """
    head = {bagio.OBJECTS_TOPIC: bagio.OBJECTS_TYPES[cfg.output.objects_type],
            GROUND_TRUTH_TOPIC: bagio.DETECTIONS_TYPE}
    return {**RECORDED_TOPICS, **(head if cfg.head.module else {})}


# What the demo writes in its --out (and replaces when run again): a folder of anything else is
# not its to write in. MARKER says a folder is a demo's.
MARKER = '.jax-perception-demo'
OWN_FILES = ('report.md', 'bev.png', 'latency.png', 'node.log', 'params.yaml',
             'params_images.yaml')
OWN_FOLDERS = ('recording', 'sample_drive_*')


def claim_out(out: Path) -> None:
    """
    Make ``out`` the demo's folder, or refuse it (UsageError) when it holds what another wrote.

    A new or empty folder, or one marked by an earlier demo (or holding only what a demo
    writes, as before the mark), is the demo's: its outputs there are replaced.
    """
    try:
        if out.exists() and not out.is_dir():
            raise UsageError(f'--out: {out} is a file; the demo writes a folder')
        entries = list(out.iterdir()) if out.exists() else []
        own = [e for e in entries if (e.name in OWN_FILES and e.is_file()) or (
            e.is_dir() and any(e.match(pattern) for pattern in OWN_FOLDERS))]
        if entries and not (out / MARKER).is_file() and len(own) < len(entries):
            other = min(e.name for e in entries if e not in own)
            raise UsageError(f'--out: {out} holds {other}, which the demo did not write; name a '
                             'new or empty folder (the demo replaces its own outputs there)')
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).touch()
    except OSError as exc:
        raise UsageError(f'--out: {out}: {exc.strerror or exc}') from None


def sample_bag(out: Path, params: Path, seconds: float) -> Path:
    """
    Return the cached sample drive for these params and duration (made on first use).

    Cameras that send images (``cameras.<name>.input: image``) get the drive's JPEGs. The
    cache key is the params' content and the sample drive's source: an edit of either, within
    the same second too, makes a new drive.
    """
    from .synthetic_drive import write_sample_bag
    cfg = load_config(params)
    images = 'jpeg' if cfg.camera_images else None
    digest = hashlib.sha256(params.read_bytes())
    for source in sorted(Path(__file__).with_name('synthetic_drive').glob('*.py')):
        digest.update(source.read_bytes())
    bag = out / (f'sample_drive_{seconds:g}s_{digest.hexdigest()[:12]}'
                 + ('_jpeg' if images else ''))
    if not (bag / 'metadata.yaml').exists():
        for old in out.glob('sample_drive_*'):
            shutil.rmtree(old, ignore_errors=True)
        print(f'generating the sample drive ({seconds:g} s) ...', flush=True)
        write_sample_bag(bag, cfg, seconds=seconds, camera_images=images,
                         image_scale=cfg.encoder.stride if images else 4)
    return bag


def demo_params(params_file: Path, out: Path, images: bool) -> Path:
    """
    Return the parameters the demo runs on: what the CLI reads of ``params_file``, in ``out``.

    One ``/**`` section, so the node started with it reads what the CLI read (of a stack's
    file, the section of this node wherever its namespace: rcl would give the node named
    jax_perception none of it). With ``images`` (``params_images.yaml``) every camera's
    ``input: image`` and, when the file names no encoder, the learned one
    (``encoders.learned``), whose weights were trained end to end with the head checkpoint
    ``head.weights: ''`` then takes.
    """
    params = read_param_file(params_file)
    names = params.get('cameras.names') or []
    if images and names and not all(params.get(f'cameras.{n}.input') == 'image' for n in names):
        params.update({f'cameras.{n}.input': 'image' for n in names})
        params['encoder.module'] = params.get('encoder.module') or IMAGE_ENCODER
    return write_param_file(params, out / ('params_images.yaml' if images else 'params.yaml'))


def run_demo(out: Path, params: str | None = None, seconds: float = 8.0,
             images: bool = True) -> int:
    """
    Run the demo into ``out``; non-zero when the node produced nothing or recompiled.

    ``images``: the cameras send the drive's JPEG images (``demo_params``); False: as the
    parameters say.
    """
    import rclpy
    from .recorder import Recorder
    params_file = Path(params) if params else default_params_file()
    load_config(params_file)     # a bad file is refused before anything is made in ``out``
    claim_out(out)
    params_file = demo_params(params_file, out, images)
    cfg = load_config(params_file)
    bag = sample_bag(out, params_file, seconds)
    env = local_ros_env()
    recording = out / 'recording'
    if recording.exists():
        shutil.rmtree(recording)

    context = rclpy.Context()
    rclpy.init(context=context)
    recorder = Recorder(recording, recorded_topics(cfg), context)
    probe = rclpy.create_node('jax_perception_demo', context=context)
    node_log = open(out / 'node.log', 'w')
    started = time.perf_counter()
    node = subprocess.Popen([console_script('jax_perception_node'), '--ros-args', '--params-file',
                             str(params_file)], stdout=node_log, stderr=subprocess.STDOUT,
                            env=env)
    try:
        while probe.count_subscribers(bagio.POINTCLOUD_TOPIC) == 0:
            if node.poll() is not None:
                print(f'the node exited during start-up; see {out / "node.log"}')
                return 1
            if time.perf_counter() - started > 120:
                print('the node did not become ready within 120 s')
                return 1
            time.sleep(0.05)
        startup_s = time.perf_counter() - started
        print(f'node ready after {startup_s:.2f} s; playing {bag.name} in real time ...',
              flush=True)
        time.sleep(0.5)     # let the player's publishers and the recorder match first
        # The ground truth on its own topic, restamped with the LiDAR (see the module doc).
        truth = ['--topic', GROUND_TRUTH_TOPIC] \
            if cfg.head.module and _has_topic(bag, GROUND_TRUTH_TOPIC) else []
        player = subprocess.run(
            [console_script('jax-perception'), 'play', str(bag), '--restamp', '--params',
             str(params_file), *truth], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        if player.returncode != 0:
            print(player.stdout)
            return 1
        # Wait for the last frame and one more /diagnostics roll-up.
        diag_seen = recorder.count(bagio.DIAGNOSTICS_TOPIC)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and recorder.count(bagio.DIAGNOSTICS_TOPIC) < \
                diag_seen + 2:
            time.sleep(0.1)
    finally:
        stop_process(node)
        node_log.close()
        recorder.close()
        probe.destroy_node()
        rclpy.try_shutdown(context=context)
    if recorder.error is not None:      # a full disk: no report from part of the drive
        raise bagio.BagError(f'recording stopped: {recorder.error}')
    return write_report(out, bag, recording, cfg, startup_s)


def _camera_input(cfg) -> str:
    """Return what the cameras sent: '4, JPEG images (encoder learned:cnn)' or maps."""
    if not cfg.cameras:
        return 'none'
    if cfg.camera_images:
        return f'{len(cfg.cameras)}, JPEG images (encoder {cfg.encoder.module.split(".")[-1]})'
    return f'{len(cfg.cameras)}, feature maps'


def _has_topic(bag: Path, topic: str) -> bool:
    reader = bagio.open_reader(bag)
    try:
        return topic in bagio.topic_types(reader)
    finally:
        reader.close()


def _pipeline_statuses(statuses, lidar_timeout_s: float):
    """Return (last status, last status while clouds were still flowing)."""
    # '<node>: pipeline', the node's fully qualified name first (/jax_perception here).
    ours = [s for s in statuses if s.name.endswith(': pipeline')]
    flowing = [s for s in ours if float({kv.key: kv.value for kv in s.values}.get(
        'seconds_since_cloud', 'inf')) < lidar_timeout_s]
    return (ours[-1] if ours else None), (flowing[-1] if flowing else None)


def _level(status) -> str:
    if status is None:
        return 'none received'
    level = ('OK', 'WARN', 'ERROR', 'STALE')[status.level]
    return level if status.message == level else f'{level}: {status.message}'


def write_report(out: Path, bag: Path, recording: Path, cfg, startup_s: float) -> int:
    """Read the recording back and write report.md, bev.png and latency.png."""
    from jax_perception_node.outputs.render import class_caption
    from jax_perception_node.sensors.camera import read_features
    from .report import latency_table, save_bev_png, save_latency_png
    reader = bagio.open_reader(bag)
    frames_in = next(c.msgcount for c in reader.connections if c.topic == bagio.POINTCLOUD_TOPIC)
    reader.close()
    records, statuses, best = [], [], None
    boxes = {bagio.OBJECTS_TOPIC: {}, GROUND_TRUTH_TOPIC: {}}   # topic -> stamp -> message
    reader = bagio.open_reader(recording)
    for topic, _, raw, msgtype in bagio.iter_messages(reader, list(recorded_topics(cfg))):
        msg = bagio.TYPESTORE.deserialize_cdr(raw, msgtype)
        if topic in boxes:
            boxes[topic][stamp_ns(msg.header.stamp)] = msg
        elif topic == bagio.LATENCY_TOPIC:
            values = {kv.key: float(kv.value) for kv in msg.status[0].values}
            records.append(values)
        elif topic == bagio.DIAGNOSTICS_TOPIC:
            statuses.extend(msg.status)
        elif topic == bagio.FEATURES_TOPIC:
            features = read_features(msg)
            score = float(features[..., 0].sum())
            if best is None or score > best[0]:
                best = (score, features.copy(), stamp_ns(msg.header.stamp))
    reader.close()
    status, playing = _pipeline_statuses(statuses, cfg.diagnostics.lidar_timeout_s)
    counts = {kv.key: kv.value for kv in status.values} if status else {}
    compiles = int(counts.get('compiles_after_warmup', '0'))
    warmup = re.search(r'warm-up: (.*)', (out / 'node.log').read_text())
    lines = [
        '# jax_perception demo report', '',
        f'Sample drive `{bag.name}` played in real time through the node (own process, DDS on '
        'loopback), outputs recorded to `recording/`.', '',
        '| | |', '|---|---:|',
        f'| LiDAR frames in the bag | {frames_in} |',
        f'| cameras | {_camera_input(cfg)} |',
        f'| frames received by the node | {counts.get("received", "?")} |',
        f'| frames out (bev_features) | {len(records)} |',
        f'| dropped (latest wins) | {counts.get("dropped", "?")} |',
        f'| rejected | {counts.get("rejected", "?")} |',
        f'| overflowed ({cfg.overflow_policy}) | {counts.get("overflowed", "?")} |',
        f'| compiles after warm-up | {compiles} |',
        f'| start-up to ready | {startup_s:.2f} s |',
        f'| /diagnostics while playing | {_level(playing)} |',
        f'| /diagnostics after the bag ended | {_level(status)} |', '',
        f'Warm-up: {warmup.group(1) if warmup else "see node.log"}', '',
        'Per-stage latency (ms); age = publish time minus the LiDAR stamp:', '',
        latency_table(records, STAGES), '',
    ]
    if records:
        points = percentiles(r['num_points'] for r in records)
        lines.append(f'Points per frame: p50 {points["p50"]:.0f}, max {points["max"]:.0f}; '
                     f'cameras used p50 '
                     f'{percentiles(r["cameras_used"] for r in records)["p50"]:.0f}.')
    classes = box_classes(boxes, cfg)
    objects, truth, detection = _detection(boxes, classes, cfg)
    if detection is not None:
        lines += detection_lines(detection)
    report = '\n'.join(lines) + '\n'
    (out / 'report.md').write_text(report)
    if best is not None:
        stamp = best[2]
        drawn = {} if not cfg.head.module else {'boxes': objects.get(stamp),
                                                'truth': truth.get(stamp)}
        caption = f'\nobjects by class: {class_caption(classes)}' if classes else ''
        save_bev_png(best[1], cfg.grid, out / 'bev.png',
                     'demo frame with the most occupied cells' + caption, **drawn)
    if records:
        save_latency_png(records, out / 'latency.png', 'demo: per-frame latency')
    print(report)
    print(f'wrote {out / "report.md"}, {out / "bev.png"}, {out / "latency.png"}, '
          f'{recording}/')
    if not records:
        print('FAILED: the node produced no output')
        return 1
    if compiles:
        print(f'FAILED: {compiles} compiles after warm-up')
        return 1
    return 0


def detection_lines(detection: dict) -> list[str]:
    """Return the report's lines of a detection block: AP@2m of one class, mAP, a class table."""
    from jax_perception_node.bags.detection_summary import class_table, mean_ap_line
    from .report import detection_line
    return ['', f'Head: {detection_line(detection)} over {detection["frames"]} frames '
            "(the node's ~/output/objects against the drive's ground truth; AP@2m of class "
            f'{detection["class"]}).', '', f'Per class: {mean_ap_line(detection)}.', '',
            class_table(detection)]


def box_classes(boxes: dict, cfg) -> tuple[str, ...]:
    """
    Return the classes the demo scores: the class ids on either box topic, known ones first.

    ``boxes``: topic -> stamp -> message. Names of ``OBJECT_CLASSES`` come in its order, others
    sorted after them. DetectedObjects carry labels, not names: their head classes are those
    of ``output.autoware_labels``.
    """
    names = set()
    for topic, messages in boxes.items():
        for msg in messages.values():
            if hasattr(msg, 'detections'):
                names.update(max(d.results, key=lambda r: r.hypothesis.score).hypothesis.class_id
                             for d in msg.detections if len(d.results))
            else:
                names.update(name for name, _ in cfg.output.autoware_labels)
    return tuple(c for c in OBJECT_CLASSES if c in names) + tuple(sorted(names - set(
        OBJECT_CLASSES)))


def _rows(msg, cfg, classes: tuple[str, ...], left_out: Counter):
    """Box rows of a Detection3DArray or DetectedObjects (classes not in ``classes`` counted)."""
    if hasattr(msg, 'detections'):
        from jax_perception_node.outputs.objects import boxes_from_detections
        return boxes_from_detections(msg, classes, left_out)
    from jax_perception_node.outputs.detected_objects import boxes_from_detected_objects
    return boxes_from_detected_objects(msg, classes, cfg.output.autoware_labels, left_out)


def _detection(boxes: dict, classes: tuple[str, ...], cfg) -> tuple[dict, dict, dict | None]:
    """
    Return (objects, ground truth), stamp -> rows each, and their detection block, or None.

    The block (``detection_summary``) scores the frames with ground truth (one without objects
    predicted nothing), or is None when no frame has both.
    """
    from jax_perception_node.bags.detection_summary import detection_summary
    left_out = Counter()
    objects = {stamp: _rows(msg, cfg, classes, Counter())
               for stamp, msg in boxes[bagio.OBJECTS_TOPIC].items()}
    truth = {stamp: _rows(msg, cfg, classes, left_out)
             for stamp, msg in boxes[GROUND_TRUTH_TOPIC].items()}
    if not any(stamp in truth for stamp in objects) or not classes:
        return objects, truth, None
    return objects, truth, detection_summary(objects, truth, classes, left_out)
