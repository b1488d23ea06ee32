"""The benchmarks' shared harness: what every comparison script in
``benchmarks/`` needs, written once.

Each script (``run.py``, ``blobs.py``, ``convert.py``, ``pack.py``,
``plone.py``...) is its own phases and tables on top of these modules:

``cli``
    The argument parser: backends, modes, sides, ``--repeat``,
    ``--quick``, the server options, ``--json``, ``--keep-data``.
``backends``
    Databases created and dropped per run, the ZConfig text that points
    either relstorage at one, FileStorage and a ZEO server.
``venvs``
    Building and reusing a venv from a marker file; the RelStorage 4.3
    reference venv (``reference``) and the clean environment every
    workload process gets.
``sides``
    Who runs: ours, RelStorage 4.3, the bare-driver floor, FileStorage,
    ZEO (an interpreter, where its relstorage must come from, its flags);
    probing them; alternating them over rounds.
``procs``
    Running a workload process and reading the JSON it writes, several at
    once, or a console script timed with its peak memory.
``figures``
    Medians, best-of, percentiles and the spread of runs.
``environment``
    The description of the machine and the software (cpu, git revision,
    versions, load average) that every result file records.
``report``
    The log with elapsed time, the tables, the target verdict lines and
    the results JSON.

The harness runs in the project's interpreter only.  The workload scripts
(``workload.py``, ``blob_workload.py``, ...) run in other interpreters
(the reference venv, the Plone venvs) and do not import it.
"""
from pathlib import Path

#: ``benchmarks/``: the scripts, their workloads and requirements files.
BENCH = Path(__file__).resolve().parent.parent
#: The checkout, and our package's sources (what our side must import).
REPO = BENCH.parent
SRC = REPO / 'src'
#: Scratch files of a run (databases of SQLite, FileStorage, logs).
DATA = BENCH / 'data'
#: Where the results go by default.
RESULTS = BENCH / 'results'
