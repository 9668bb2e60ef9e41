"""Part 'lidar' of the report: its targets and its markdown (no JAX: ``bench --markdown``)."""

SMEAR_REMOVED_TARGET = 0.9
DESKEW_COST_TARGET = 1.15
THREE_LIDARS_TARGET = 1.2


def lidar_targets(results: dict, item) -> list:
    """Return the part's targets, built with report.targets' ``item`` ([] when not run)."""
    lidar = results.get('lidar')
    if not lidar:
        return []
    items = [
        item(f'lidar.smear.removed_above_floor (at {lidar["smear"]["speed_m_s"]:g} m/s, static '
             'cells, above the parallax floor)', f'>= {SMEAR_REMOVED_TARGET}',
             lidar['smear']['removed_above_floor'], lambda v: v >= SMEAR_REMOVED_TARGET),
        item('lidar.deskew_cost.ratio (frame with / without deskew, LiDAR only)',
             f'<= {DESKEW_COST_TARGET}', lidar['deskew_cost']['ratio'],
             lambda v: v <= DESKEW_COST_TARGET),
    ]
    if 'three_lidars' in lidar:
        items.append(item('lidar.three_lidars.ratio (three LiDARs / one, same 131k points, '
                          'frame executable)', f'<= {THREE_LIDARS_TARGET}',
                          lidar['three_lidars']['ratio'], lambda v: v <= THREE_LIDARS_TARGET))
    rows = (lidar.get('decode') or {}).get('rows') or []
    flat = [r['ratio'] for r in rows if r['ratio_organized'] is None]
    organized = [r['ratio_organized'] for r in rows if r['ratio_organized'] is not None]
    if rows:
        items += [
            item('lidar.decode (slowest unorganized driver layout / plain layout)', '<= 2',
                 max(flat), lambda v: v <= 2),
            item('lidar.decode (slowest organized driver layout / the plain layout organized '
                 'alike, no-return slots skipped)', '<= 2', max(organized), lambda v: v <= 2),
        ]
    return items


def lidar_part(results: dict) -> list[str]:
    """Part 10 of the report: smear, deskew cost, decode by layout; [] when it did not run."""
    lidar = results.get('lidar')
    if not lidar:
        return []
    s, c = lidar['smear'], lidar['deskew_cost']
    lines = ['', '## 10. Real LiDARs: deskew, several LiDARs, driver layouts', '',
             f'Deskew at {s["speed_m_s"]:g} m/s (the synthetic drive at t = {s["times_s"]} s, '
             f'{s["points"]} points above the ground in all): '
             f'{s["differing_cells_measured"]} occupied cells differ '
             f'from the instant sweep as measured, {s["differing_cells_deskewed"]} deskewed '
             f'({s["removed"]:.0%} of the smear removed; two exact sweeps half a rotation '
             f'apart differ in {s["parallax_floor_cells"]}: {s["removed_above_floor"]:.0%} of '
             f'what any deskew can remove; {s["cells_left_out"]} cells near '
             f'moving traffic or the x edges of the grid left out). Cost: {c["points"]} '
             f'points, frame '
             f'{c["with_ms"]["p50"]} ms with deskew, {c["without_ms"]["p50"]} ms without '
             f'({c["ratio"]}x, calls alternated).']
    three = lidar.get('three_lidars')
    if three:
        lines += ['', f'Three LiDARs: {three["points"]} points split {three["split"]} into the '
                  "three-LiDAR rig's clouds, against one LiDAR's cloud of the same points "
                  f'({three["cells_differing"]} occupied cells differ): the frame executable '
                  f'{three["three_ms"]["p50"]} ms against {three["one_ms"]["p50"]} ms '
                  f'({three["ratio"]}x), the whole frame path with decode '
                  f'{three["three_frame_ms"]["p50"]} ms against {three["one_frame_ms"]["p50"]} '
                  f'ms ({three["frame_ratio"]}x), {_order(three)}.']
    rows = (lidar.get('decode') or {}).get('rows') or []
    if rows:
        lines += ['', 'Decode (`returns` then `read_points` into one buffer), every layout with '
                  'the same returns, alternated; organized layouts with 25 % no-return slots:',
                  '', '| layout | point_step | slots | decode ms | x plain | x plain organized |',
                  '|---|---:|---:|---:|---:|---:|']
        lines += [f'| {r["layout"]} | {r["point_step"]} | {r["slots"]} | {r["decode_ms"]} | '
                  f'{r["ratio"]} | {r["ratio_organized"] or ""} |' for r in rows]
    return lines


def _order(three: dict) -> str:
    """Say how the three-LiDAR part ordered its calls (older runs: sorted, mirrored by round)."""
    if three.get('order') == 'balanced':
        return ('the four calls in a balanced order (none twice in a row, each right after '
                'every other equally often)')
    return 'calls alternated'
