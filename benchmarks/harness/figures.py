"""The figures of several runs: medians, best-of, percentiles and how far
the runs of one side lie apart.

Write figures and whole-process times are medians of the runs; read
figures of fresh processes can be the best run (see run.py's best_of).
"""
import statistics


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def medians(runs):
    """``{key: median}`` of dicts of figures: each key over the runs that
    have it."""
    out = {}
    for key in dict.fromkeys(k for run in runs for k in run):
        values = [run[key] for run in runs if run.get(key) is not None]
        if values:
            out[key] = statistics.median(values)
    return out


def best(values, lowest=False):
    """The highest value (a rate), or with ``lowest`` the lowest (a
    time); None when there is none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return min(values) if lowest else max(values)


def percentile(ordered, fraction):
    """Nearest rank of sorted values."""
    if not ordered:
        return None
    index = min(len(ordered) - 1,
                max(0, int(round(fraction * len(ordered))) - 1))
    return ordered[index]


def latencies(samples):
    """p50, p99, the maximum and the count of latency samples."""
    ordered = sorted(samples)
    return {'p50': percentile(ordered, 0.5),
            'p99': percentile(ordered, 0.99),
            'max': ordered[-1] if ordered else None,
            'samples': len(ordered)}


def spread(values):
    """Half the range of the values over their median: how far the runs
    of one side lie from each other (0 with fewer than two)."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / (2 * statistics.median(values))
