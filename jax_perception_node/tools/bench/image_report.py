"""Part 'images' of the report: its targets and its markdown (no JAX: ``bench --markdown``)."""

IMAGES_OVER_LIDAR_TARGET = 1.5
SIX_CAMERA_DECODE_MS_TARGET = 10.0
SIX_CAMERA_ROW = 'ring6_1600x900_jpeg_scaled_threads'     # as the node decodes them


def image_targets(results: dict, item) -> list:
    """Return the part's targets, built with report.targets' ``item`` ([] when not run)."""
    images = results.get('images')
    if not images:
        return []
    six = next(r['ms'] for r in images['decode'] if r['name'] == SIX_CAMERA_ROW)
    return [
        item(f'images.images_over_lidar ({images["cameras"]} JPEG cameras at {images["image"]}: '
             'host decode + encoder + lift, frame / LiDAR-only frame, '
             f'{images["points"]} points)', f'<= {IMAGES_OVER_LIDAR_TARGET}',
             images['images_over_lidar'], lambda v: v <= IMAGES_OVER_LIDAR_TARGET),
        item('images.decode (six 1600 x 900 JPEGs to 400 x 225, scaled decode, at once on '
             "the node's decode pool, ms)",
             f'<= {SIX_CAMERA_DECODE_MS_TARGET:g}', six,
             lambda v: v <= SIX_CAMERA_DECODE_MS_TARGET),
        item('images.compiles_after_warmup', '== 0', images['compiles_after_warmup'],
             lambda v: v == 0),
    ]


def image_part(results: dict) -> list[str]:
    """Part 11 of the report: frames with images, the encoder, the decode rows."""
    images = results.get('images')
    if not images:
        return []
    ms, enc = images['frame_ms'], images['encoder']
    lines = ['', '## 11. Cameras as images: decode, encoder, lift', '',
             f'{images["points"]} points; frames interleaved, p50 ms; the cameras\' inputs '
             'change every frame.', '',
             '| frame | ms | / LiDAR only |', '|---|---:|---:|',
             f'| LiDAR only | {ms["lidar"]} | 1 |',
             f'| {images["cameras"]} cameras, feature maps | {ms["features"]} | '
             f'{images["features_over_lidar"]} |',
             f'| {images["cameras"]} cameras, JPEG {images["image"]} (host decode, appearance '
             f'encoder, lift) | {ms["images"]} | {images["images_over_lidar"]} |',
             f'| {images["cameras"]} cameras, JPEG {images["image"]} (host decode, learned '
             f'encoder, lift) | {ms["learned"]} | {images["learned_over_lidar"]} |', '',
             *(f'{what} encoder alone on the {images["cameras"]} images: JAX {e["jax_ms"]} ms'
               + (f', PyTorch eager {e["torch_ms"]} ms (same output within '
                  f'{e["torch_max_abs_diff"]:.2g})' if 'torch_ms' in e else '') + '.'
               for what, e in (('Appearance', enc), ('Learned', images['learned_encoder']))),
             '',
             '| host decode, one frame | cameras | source | encoder input | transport | scaled '
             '| threads | ms |', '|---|---:|---|---|---|---|---:|---:|']
    for r in images['decode']:
        scaled = {True: 'yes', False: 'no', None: '-'}[r['scaled']]
        lines.append(f'| {r["name"]} | {r["cameras"]} | {r["source"]} | {r["target"]} | '
                     f'{r["transport"]} | {scaled} | {r["threads"]} | {r["ms"]} |')
    return lines
