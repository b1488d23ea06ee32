"""The writer's commit times by phase of a pack: which phase of a pack
slowed a writer, and in which part of its commits.

    python3 benchmarks/pack_phases.py benchmarks/data/pack_repeat/<pid> 1-now 2-old

For each tag, a pack_repeat.py pack: its log (``<tag>.log``, zodbpack's,
each line with its time), and the writer's timings during it
(``<tag>-pack-latencies``, and ``.parts`` beside it where the writer
wrote them: pack_workload.py's ``timed_commits``).  The pack's progress
lines mark its phases (each phase's first line, and the line it ends
with); the commits begun in a phase are counted there.  Per phase: its
seconds, the commits, their p50 and p99 (ms), and of those over
SLOW seconds, the mean of each part: ``begin`` (the poll, at
``transaction.begin()``), ``change`` (the loads of what the commit
changes) and ``commit``.  The same for the writer alone before the pack
(``<tag>-alone-latencies``), for comparison.  The log's times are read
as packlog.py reads them (the machine's local time).
"""
import argparse
import json
import re
from pathlib import Path

from harness.figures import percentile as ranked
from packlog import log_time

#: Commits slower than this (seconds) are split into their parts.
SLOW = 0.010
#: A progress line of the pack: 'pack: <phase>[: ...]'.
PROGRESS = re.compile(r'\] INFO pack: (.*)$')
#: The line a phase ends with: '... in 12.3s'.
ENDED = re.compile(r' in [\d.]+s$')


def stamp(line):
    """A log line's time in seconds since the epoch, or None."""
    at = log_time(line)
    return None if at is None else at.timestamp()


def percentile(values, fraction):
    return ranked(sorted(values), fraction)


def phases(log_path):
    """``[(start, name)]`` from the pack's log, and the time of its last
    line."""
    marks, last = [], None
    for line in Path(log_path).read_text().splitlines():
        at = stamp(line)
        if at is None:
            continue
        last = at
        found = PROGRESS.search(line)
        if found is None:
            continue
        message = found.group(1)
        name = message.split(':')[0] if ': ' in message else message
        if ENDED.search(message):
            # The end of a phase: what follows it is another.
            marks.append((at, 'after ' + name))
        elif not marks or marks[-1][1] != name:
            marks.append((at, name))
    return marks, last


def load(path):
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else []


def row(name, seconds, times, parts):
    """One line: a phase's commits."""
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
    line = (f'{seconds:7.1f}s  {name[:44]:44s} {len(times):5d}  '
            f'{1000 * p50:6.1f} {1000 * p99:6.1f}')
    slow = [p for p in parts if sum(p[1:]) > SLOW]
    if slow:
        means = [1000 * sum(p[i] for p in slow) / len(slow)
                 for i in (1, 2, 3)]
        line += ('  %5d: %5.1f %6.1f %6.1f' % (len(slow), *means))
    return line


def report(work, tag):
    marks, end = phases(work / f'{tag}.log')
    if not marks:
        return [f'{tag}: no progress lines in {tag}.log']
    pack = work / f'{tag}-pack-latencies'
    times, parts = load(pack), load(str(pack) + '.parts')
    alone = work / f'{tag}-alone-latencies'
    lines = [f'{tag}: pack {end - marks[0][0]:.1f}s',
             f'{"":9s} {"phase (commits begun in it)":44s} {"n":>5s}  '
             f'{"p50":>6s} {"p99":>6s}  slow (>{1000 * SLOW:g} ms): '
             'begin, change, commit (ms, mean)']
    alone_times = [s for _, s in load(alone)]
    if alone_times:
        lines.append(row('the writer alone', 0.0, alone_times,
                         load(str(alone) + '.parts')))
    bounds = marks + [(end, None)]
    for (start, name), (stop, _) in zip(bounds, bounds[1:]):
        mine = [s for at, s in times if start <= at < stop]
        if mine:
            lines.append(row(name, stop - start, mine,
                             [p for p in parts if start <= p[0] < stop]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('work', type=Path,
                        help="a pack_repeat.py run's directory of logs")
    parser.add_argument('tags', nargs='+', help='packs: 1-now, 2-old...')
    args = parser.parse_args(argv)
    for tag in args.tags:
        print('\n'.join(report(args.work, tag)))
        print()


if __name__ == '__main__':
    main()
