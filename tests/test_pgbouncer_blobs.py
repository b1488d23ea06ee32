"""Blobs kept in the database, written and read by several processes
through PgBouncer in transaction mode (see test_pgbouncer.py): the test
of test_blobs.py, collected here again with ``backend`` overridden."""
import pytest

from test_blobs import BLOB_MODES
from test_blobs import dbs  # noqa: F401
from test_blobs import spawn  # noqa: F401
from test_blobs import test_processes_write_and_read_blobs_concurrently  # noqa: F401,E501
from test_pgbouncer import backend  # noqa: F401
from test_pgbouncer import transaction_bouncer  # noqa: F401

pytestmark = pytest.mark.postgresql


@pytest.fixture(params=[mode for mode, shared in sorted(BLOB_MODES.items())
                        if not shared])
def blob_mode(request):
    """Only blobs kept in the database: those in a shared directory never
    go through the bouncer."""
    return request.param
