"""Compare two result files of run.py, figure by figure.

    python benchmarks/compare.py OLD.json [NEW.json]

NEW defaults to benchmarks/results/latest.json.  For every backend, mode,
implementation and phase present in both, prints both figures and how many
times faster the new one is (> 1.0: faster now).
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import LABELS, METRICS, MODES, UNITS, fmt, ratio  # noqa: E402


def main(argv):
    if not argv or len(argv) > 2:
        raise SystemExit(__doc__)
    old = json.loads(Path(argv[0]).read_text())
    new_path = argv[1] if len(argv) > 1 else HERE / 'results' / 'latest.json'
    new = json.loads(Path(new_path).read_text())
    print(f"old: {old['environment']['date']} (git {old['environment']['git']})")
    print(f"new: {new['environment']['date']} (git {new['environment']['git']})")
    for backend, modes in new['summary'].items():
        for mode, impls in modes.items():
            before_modes = old['summary'].get(backend, {}).get(mode, {})
            rows = []
            for impl, metrics in impls.items():
                before = before_modes.get(impl) or {}
                for key, label, kind in METRICS:
                    if not metrics or key not in metrics or key not in before:
                        continue
                    r = ratio(metrics[key], before[key], kind)
                    rows.append(f'  {LABELS[impl]:<7} {label:<28} '
                                f'{UNITS[kind]:<9} {fmt(before[key], kind):>10}'
                                f' {fmt(metrics[key], kind):>10}  '
                                f'{r:5.2f}')
            if rows:
                print(f'\n{backend}, {MODES[mode][0]}: old, new, '
                      f'new faster by')
                print('\n'.join(rows))


if __name__ == '__main__':
    main(sys.argv[1:])
