"""
Statistics of the ROS part: per-rate stream figures, the peak rate, the node's warm-up line.

Pure functions over what the helper processes wrote (``ros_processes.py``); ``ros.py`` runs
the processes.
"""

import re

import numpy as np

from .common import DROP_LIMIT_PCT, rounded


def parse_warmup_log(text: str) -> dict | None:
    """Parse the node's 'warm-up: calibration 12 ms, 16384 300 ms, ...; total 1.2 s' line."""
    match = re.search(r'warm-up: (.*?); total ([0-9.]+) s', text)
    if not match:
        return None
    parts = {}
    for item in match.group(1).split(', '):
        name, _, value = item.rpartition(' ')[0].rpartition(' ')
        try:
            parts[name or item.split(' ')[0]] = float(value)
        except ValueError:
            continue
    return {'ms': parts, 'total_s': float(match.group(2))}


def stream_stats(published: dict, received: dict) -> dict:
    """
    Per segment: age p50 / p99 / max (ms), jitter, missed frames, received rate, node stages.

    Age = receive wall time minus the header stamp (the publisher's wall clock at publish).
    Missed = published minus received (ros2_benchmark's "# of Missed Frames"); jitter =
    |difference of consecutive inter-arrival intervals| (ms), mean / max / std, as
    ros2_benchmark's frame-to-frame jitter. Node stages are p50 of its ~/debug/latency values.
    """
    arrivals = {}
    for stamp, when in received['features']:
        arrivals.setdefault(stamp, when)
    latency = dict(received['latency'])   # [stamp, values] pairs
    out = {}
    for label, segment in published.items():
        stamps = segment['stamps_ns']
        got = sorted((arrivals[s], s) for s in stamps if s in arrivals)
        ages = np.array([(when - s) / 1e6 for when, s in got])
        missed = len(stamps) - len(got)
        row = {'rate_hz': segment['rate_hz'], 'published': len(stamps), 'received': len(got),
               'missed': missed, 'missed_pct': rounded(100.0 * missed / max(1, len(stamps)), 2)}
        if len(ages):
            row.update({'age_p50_ms': rounded(np.percentile(ages, 50)),
                        'age_p99_ms': rounded(np.percentile(ages, 99)),
                        'age_max_ms': rounded(ages.max())})
        else:
            row.update({'age_p50_ms': None, 'age_p99_ms': None, 'age_max_ms': None})
        when = np.array([w for w, _ in got], np.float64) / 1e6
        if len(when) > 2:
            jitter = np.abs(np.diff(np.diff(when)))
            span_s = (when[-1] - when[0]) / 1e3
            row.update({'jitter_mean_ms': rounded(jitter.mean()),
                        'jitter_max_ms': rounded(jitter.max()),
                        'jitter_std_ms': rounded(jitter.std()),
                        'received_rate_hz': rounded((len(when) - 1) / span_s, 2)})
        else:
            row.update({'jitter_mean_ms': None, 'jitter_max_ms': None, 'jitter_std_ms': None,
                        'received_rate_hz': None})
        row['publisher_ms_p50'] = rounded(np.median(segment['publish_ms'])) if stamps else None
        if len(stamps) > 1:
            span_s = (stamps[-1] - stamps[0]) / 1e9
            row['published_rate_hz'] = rounded((len(stamps) - 1) / span_s, 2)
        records = [latency[s] for s in stamps if s in latency]
        node = {}
        for key in ('decode_ms', 'pad_ms', 'compute_ms', 'publish_ms', 'total_ms', 'age_ms'):
            values = [r[key] for r in records if key in r]
            node[key] = rounded(np.median(values)) if values else None
        pipeline = [r['pad_ms'] + r['compute_ms'] for r in records
                    if 'pad_ms' in r and 'compute_ms' in r]
        node['pipeline_ms'] = rounded(np.median(pipeline)) if pipeline else None
        # Per frame: its age minus its own pipeline time (pairs each frame with itself).
        paired = [(when - s) / 1e6 - latency[s]['pad_ms'] - latency[s]['compute_ms']
                  for when, s in got if 'compute_ms' in latency.get(s, {})
                  and 'pad_ms' in latency[s]]
        node['age_minus_pipeline_ms'] = rounded(np.median(paired)) if paired else None
        row['node_p50'] = node if records else None
        out[label] = row
    return out


def peak_rate(rows: list[dict]) -> float | None:
    """Return the highest rate before the first one with >= 5 % missed (None: the first)."""
    best = None
    for row in sorted(rows, key=lambda r: r['rate_hz']):
        if row['missed_pct'] is None or row['missed_pct'] >= DROP_LIMIT_PCT:
            break
        best = row['rate_hz']
    return best
