"""Compare two result files of run.py, figure by figure.

    python benchmarks/compare.py OLD.json [NEW.json]

NEW defaults to benchmarks/results/latest.json.  For every backend, mode,
implementation and phase present in both (and FileStorage and ZEO), prints
both figures and how many times faster the new one is (> 1.0: faster
now).
"""
import json
import sys
from pathlib import Path

from harness import RESULTS
from harness.backends import MODES
from harness.sides import LABELS
from run_report import METRICS, UNITS, fmt, label_of, ratio


def groups(document):
    """``{title: {implementation: metrics}}`` of one result file."""
    out = {}
    for backend, modes in document['summary'].items():
        for mode, impls in modes.items():
            out[f'{backend}, {MODES[mode][0]}'] = impls
    if document.get('others_summary'):
        out['FileStorage and ZEO'] = document['others_summary']
    return out


def main(argv):
    if not argv or len(argv) > 2:
        raise SystemExit(__doc__)
    old = json.loads(Path(argv[0]).read_text())
    new_path = argv[1] if len(argv) > 1 else RESULTS / 'latest.json'
    new = json.loads(Path(new_path).read_text())
    for name, document in (('old', old), ('new', new)):
        env = document['environment']
        print(f"{name}: {env['date']} (git {env['git']})")
    processes = new.get('settings', {}).get('processes', '?')
    before_groups = groups(old)
    for title, impls in groups(new).items():
        rows = []
        for impl, metrics in impls.items():
            before = before_groups.get(title, {}).get(impl) or {}
            for key, label, kind in METRICS:
                if not metrics or key not in metrics or key not in before:
                    continue
                r = ratio(metrics[key], before[key], kind)
                rows.append(f'  {LABELS[impl]:<11} '
                            f'{label_of(label, processes):<28} '
                            f'{UNITS[kind]:<9} {fmt(before[key], kind):>10}'
                            f' {fmt(metrics[key], kind):>10}  {r:5.2f}')
        if rows:
            print(f'\n{title}: old, new, new faster by')
            print('\n'.join(rows))


if __name__ == '__main__':
    main(sys.argv[1:])
