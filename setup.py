import os

from setuptools import find_packages
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read(name):
    with open(os.path.join(HERE, name), encoding='utf-8') as f:
        return f.read()


setup(
    name='relstorage',
    version='0.1.0.dev0',
    description='A ZODB storage that keeps pickles in a relational database.',
    long_description=read('README.rst'),
    long_description_content_type='text/x-rst',
    license='ZPL-2.1',
    # The schema's migration steps live at the top of the source tree
    # (migrations/) and are installed as relstorage.migrations.
    package_dir={'': 'src', 'relstorage.migrations': 'migrations'},
    packages=find_packages('src') + ['relstorage.migrations'],
    include_package_data=True,
    package_data={
        'relstorage': ['component.xml'],
        'relstorage.migrations': ['*/*.sql', '*.rst'],
        'relstorage.adapters.sqlite': ['*.sql'],
        'relstorage.adapters.postgresql': ['*.sql'],
        'relstorage.adapters.mysql': ['*.sql'],
        'relstorage.adapters.oracle': ['*.sql'],
    },
    python_requires='>=3.9',
    install_requires=[
        'ZODB >= 5.8',
        'persistent',
        'transaction',
        'zope.interface',
        'ZConfig',
    ],
    extras_require={
        'postgresql': ['psycopg2-binary >= 2.9', 'psycopg[binary] >= 3.1'],
        'mysql': ['mysqlclient >= 2.1', 'PyMySQL >= 1.0'],
        'oracle': ['oracledb >= 1.4'],
        # storage.metrics() exported to Prometheus (relstorage/metrics.py).
        'prometheus': ['prometheus_client'],
        # The tests run against real servers, with every driver.
        # pytest-timeout: a test stuck on a lock is reported with every
        # thread's stack instead of running into CI's time limit.
        'test': ['pytest >= 7', 'pytest-xdist', 'pytest-timeout', 'ruff', 'zope.testing', 'manuel', 'zodburi >= 2.5',
                 'sphinx', 'prometheus_client', 'hypothesis >= 6',
                 'gevent', 'psycogreen',
                 'psycopg2-binary >= 2.9', 'psycopg[binary] >= 3.1',
                 'mysqlclient >= 2.1', 'PyMySQL >= 1.0',
                 # The Oracle adapter's tests without a server: the
                 # driver's exception classes, an Oracle SQL parser.
                 'oracledb >= 1.4', 'sqlglot'],
        # benchmarks/run.py: both server drivers, and ZEO to compare with.
        'bench': ['psycopg2-binary >= 2.9', 'mysqlclient >= 2.1', 'ZEO'],
        'docs': ['sphinx'],
    },
    entry_points={
        'console_scripts': [
            'zodbpack = relstorage.cli.zodbpack:main',
            'zodbconvert = relstorage.cli.zodbconvert:main',
            'relstorage-migrate = relstorage.cli.migrate:main',
            'relstorage-stats = relstorage.cli.stats:main',
            'relstorage-mirror = relstorage.cli.mirror:main',
            'relstorage-query = relstorage.cli.query:main',
        ],
        # relstorage from a URI (see relstorage/uri.py).
        'zodburi.resolvers': [
            'postgresql = relstorage.config.uri:resolve_postgresql',
            'postgres = relstorage.config.uri:resolve_postgresql',
            'mysql = relstorage.config.uri:resolve_mysql',
            'sqlite = relstorage.config.uri:resolve_sqlite',
        ],
    },
    zip_safe=False,
    classifiers=[
        'Framework :: ZODB',
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Zope Public License',
    ],
)
