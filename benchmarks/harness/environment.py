"""What a result was measured on: the machine, the servers, the versions of
each side, the git revision and the load average, recorded in every
result file and printed at the top of every report; and the warnings
that make a figure less trustworthy (other work on the machine, our
sources edited during the run).
"""
import compileall
import datetime
import hashlib
import os
import platform
import subprocess

from . import REPO, SRC

#: The server versions' keys in the environment, per backend.
SERVER_KEYS = {'postgresql': 'postgresql_server', 'mysql': 'mysql_server',
               'sqlite': 'sqlite_library'}


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision():
    """The checkout's commit, and whether ``src/`` differs from it."""
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', 'src'],
                               cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.strip()
        return rev + (' (src/ modified)' if dirty else '')
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def compile_ours():
    """Compile our package's bytecode, as an install from a wheel has it.
    The workloads run with PYTHONDONTWRITEBYTECODE (``venvs.clean_env``):
    a module edited since it was last compiled would be compiled again by
    every process of ours, while pip compiled RelStorage 4.3's venv (tens
    of milliseconds a process: a tenth of a small zodbconvert)."""
    compileall.compile_dir(str(SRC / 'relstorage'), quiet=1)


def environment(servers, probes=None, **extra):
    """The environment of a run: the machine, ``servers`` (``{backend:
    version}``), each side's ``probes`` (what its workload's probe said:
    versions and paths) and ``extra`` keys.  Compiles our package first
    (``compile_ours``)."""
    compile_ours()
    env = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
        'cpus': os.cpu_count(),
        'cpu': cpu_model(),
        'platform': platform.platform(),
        'git': git_revision(),
        'load_average': load_average(),
    }
    for backend, version in servers.items():
        env[SERVER_KEYS[backend]] = version
    for impl, info in (probes or {}).items():
        env[impl] = {k: v for k, v in info.items() if k != 'platform'}
    env.update(extra)
    return env


def finish(env):
    """The environment as the run ends (in place): the load average and
    the git revision then."""
    env['load_average_end'] = load_average()
    env['git_end'] = git_revision()
    return env


def describe(env):
    """The lines at the top of a report."""
    lines = [
        f"date            {env['date']}",
        f"machine         {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['platform']}",
    ]
    for key, name in (('postgresql_server', 'PostgreSQL'),
                      ('mysql_server', 'MariaDB'),
                      ('sqlite_library', 'SQLite')):
        if key in env:
            lines.append(f'{name:<15} {env[key]}')
    for impl in ('ours', 'ref'):
        info = env.get(impl)
        if not info:
            continue
        name = 'ours' if impl == 'ours' else 'RelStorage 4.3'
        lines.append(f"{name:<15} relstorage {info['relstorage']} from "
                     f"{info['relstorage_file']}")
        lines.append(f"{'':<15} {versions(info)}")
    if env.get('ours', {}).get('ZEO'):
        lines.append(f"{'ZEO':<15} ZEO {env['ours']['ZEO']} (server and "
                     f"client in the project's venv), FileStorage from ZODB "
                     f"{env['ours'].get('ZODB')}")
    for name, info in env.get('venvs', {}).items():
        lines.append(
            f"{name + ' venv':<15} Plone {info['Plone']} "
            f"(Products.CMFPlone {info['Products.CMFPlone']}, Zope "
            f"{info['Zope']}, plone.api {info['plone.api']}), "
            + versions(info))
        lines.append(f"{'':<15} relstorage {info['relstorage']} from "
                     f"{info['relstorage_file']}")
    lines.append(f"ours at         git {env['git']}")
    lines.append(f"load average    {env['load_average']} at the start")
    if 'load_average_end' in env:
        lines.append(f"load average    {env['load_average_end']} at the "
                     f"end")
    return lines


def versions(info):
    psycopg2 = info.get('psycopg2-binary') or info.get('psycopg2')
    return (f"Python {info['python']}, ZODB {info.get('ZODB')}, "
            f"persistent {info.get('persistent')}, BTrees "
            f"{info.get('BTrees')}, psycopg2 {psycopg2}, mysqlclient "
            f"{info.get('mysqlclient')}, SQLite {info.get('sqlite')}")


def load_warning(loads):
    """A warning when the load average went above what a run keeps busy
    (a workload and a database server: about two processes)."""
    loads = [x for x in loads if x is not None]
    if loads and max(loads) > (os.cpu_count() or 1) + 1:
        return [f'WARNING: the load average reached {max(loads):.2f} on '
                f'{os.cpu_count()} CPUs: other work shared the machine, '
                f'and the figures are less reliable.', '']
    return []


def src_digest():
    """A digest of our package's files.  The checkout may be edited while a
    run goes on, and each process imports what is there when it starts:
    each run of ours records the digest (``digest_after``), and the report
    warns when it changed (``sources_warning``)."""
    digest = hashlib.sha256()
    package = SRC / 'relstorage'
    for path in sorted(package.rglob('*')):
        if path.is_file() and '__pycache__' not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def digest_after(before):
    """``before``, marked when the sources changed since it was taken."""
    return before if src_digest() == before else (
        before + ' (changed during this run)')


def sources_warning(digests):
    """The report's warning when our runs saw more than one version of our
    sources, or one changed during a run."""
    digests = sorted({d for d in digests if d})
    if len(digests) > 1 or any('changed' in d for d in digests):
        return [f'WARNING: our sources (src/relstorage) changed during the '
                f'run: {", ".join(digests)}', '']
    return []
