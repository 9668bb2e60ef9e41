"""
The soak report: ``make soak`` writes ``soak_out/soak.json``; this renders it as tables.

The tables go in docs/reliability.md; ``docs/soak.json`` is the committed run behind them (a
test checks that they agree). ``soak`` is the closed-loop soak; ``load_soak``, rendered when
present, the open-loop load soak; both come from ``test/ros/test_soak.py``.
"""


def soak_markdown(results: dict) -> str:
    """
    Render the soak runs' results (``make soak`` -> ``soak_out/soak.json``) as tables.

    They are docs/reliability.md's soak tables.

    ``soak``: the closed-loop soak; ``load_soak`` (rendered when present): the open-loop load.
    """
    m, s = results['machine'], results['soak']
    slope = s.get('rss_slope_mib_per_min')
    lines = [
        f'Soak of {s["seconds"]:.0f} s on {m["nproc"]} CPUs ({m["cpu"]}), {m.get("date", "")}, '
        f'commit {m.get("commit") or "unknown"}' + (f' ({m["note"]})' if m.get('note') else '')
        + ': the node at its closed-loop peak rate, shipped config with 4 cameras, cloud sizes '
        'from 0 to twice the largest bucket, 5 % truncated clouds.', '',
        '| frames processed | rate | malformed sent | lost in transport | compiles after warm-up '
        '| RSS (after the first window -> end) | total_ms p99 (first -> last window) |',
        '|---:|---:|---:|---:|---:|---|---|',
        f'| {s["processed"]} | {s["rate_hz"]:g} Hz | {s["malformed"]} | '
        f'{s["lost_in_transport"]} | {s["compiles_after_warmup"]} | {s["rss_mib"][0]:g} -> '
        f'{s["rss_mib"][1]:g} MiB ({s["rss_growth_pct"]:+.1f} %'
        + ('' if slope is None else f', {slope:+.2f} MiB/min') + ') | '
        f'{s["total_ms_p99"][0]:g} -> {s["total_ms_p99"][1]:g} ms ({s["window_s"]:g} s '
        'windows) |', '',
        f'Accounting: received {s["received"]} = processed {s["processed"]} + dropped '
        f'{s["dropped"]} + rejected {s["rejected"]}. Frames per second per 20 s window: '
        + ', '.join(f'{r:g}' for r in s['rate_hz_windows']) + '.', *_private_lines(s)]
    if results.get('load_soak'):
        lines += ['', *_load_soak_lines(results['load_soak'])]
    return '\n'.join(lines + [''])


def _load_soak_lines(load: dict) -> list[str]:
    """Render the open-loop load soak: what was sent, what the node made of it, RSS slope."""
    lines = [
        f'Load soak of {load["seconds"]:.0f} s, same machine and config: a {load["points"]}-point '
        f'cloud and {load["cameras"]} camera maps published open loop every '
        f'{1000 / load["rate_hz"]:g} ms ({load["published_hz"]:g} Hz achieved by the '
        'publisher), whatever the node does; it keeps up by dropping (latest wins). RSS '
        f'sampled every second; the slope is a least-squares fit after {load["warmup_s"]:g} s '
        'of warm-up.', '',
        '| published | taken by the node | processed | dropped (latest wins) | not taken (DDS '
        'history) | frames with all cameras | compiles after warm-up | RSS (after warm-up -> '
        'end) | RSS slope | total_ms p50 / p99 | age_ms p50 / p99 |',
        '|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|',
        f'| {load["published"]} | {load["received"]} | {load["processed"]} '
        f'({load["processed_hz"]:g} Hz) | {load["dropped"]} | {load["not_taken"]} | '
        f'{load["frames_all_cameras"]} | {load["compiles_after_warmup"]} | '
        f'{load["rss_mib"][0]:g} -> {load["rss_mib"][1]:g} MiB ({load["rss_growth_pct"]:+.1f} '
        f'%) | {load["rss_slope_mib_per_min"]:+.2f} MiB/min | {load["total_ms"]["p50"]:g} / '
        f'{load["total_ms"]["p99"]:g} ms | {load["age_ms"]["p50"]:g} / '
        f'{load["age_ms"]["p99"]:g} ms |']
    if load.get('rss_mib_windows'):
        lines += ['', 'RSS at the end of each minute (MiB): '
                  + ', '.join(f'{r:g}' for r in load['rss_mib_windows']) + '.']
    return lines + _private_lines(load)


def _private_lines(run: dict) -> list[str]:
    """Render the leak measure (private memory per 10k frames), when the run has it."""
    per_10k = run.get('private_mib_per_10k_frames')
    if per_10k is None:
        return []
    return ['', f'Private memory (RSS less shared pages) over the second half of the run: '
            f'{per_10k:+.2f} MiB per 10k frames. A leak of 1 KiB a frame would show about 9.8; '
            'the soak fails at 3. RSS itself also grows in a few steps early on, when the heap '
            'keeps freed multi-MB message buffers, and then stays flat.']
