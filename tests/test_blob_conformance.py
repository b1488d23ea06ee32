"""ZODB's blob tests (``ZODB.tests.testblob``'s storage-reusable suite with
its blob doctests, ``blob_basic.txt`` and ``IExternalGC.test``) on every
backend, history mode and blob mode.  See blob_suites.py."""
import pytest

import blob_suites

BLOB_MODES = {'shared': True, 'cached': False}


def _params(keep_history):
    return [pytest.param(name, case, id=name) for name, case in
            sorted(blob_suites.cases(keep_history).items())]


@pytest.fixture(params=sorted(BLOB_MODES))
def blob_mode(request):
    return request.param


def _run(backend, keep_history, blob_mode, case):
    context = blob_suites.Context(backend, keep_history,
                                  BLOB_MODES[blob_mode])
    result = blob_suites.run(case, context)
    problems = [text for _, text in result.errors + result.failures]
    assert not problems, '\n'.join(problems)
    assert not result.skipped, result.skipped
    assert result.testsRun == 1


@pytest.mark.parametrize('name, case', _params(True))
def test_history_preserving(backend, blob_mode, name, case):
    _run(backend, True, blob_mode, case)


@pytest.mark.parametrize('name, case', _params(False))
def test_history_free(backend, blob_mode, name, case):
    _run(backend, False, blob_mode, case)


def test_collected_the_suites():
    # Undo, recovery and packing cases exist only with history.
    hp = blob_suites.cases(True)
    hf = blob_suites.cases(False)
    assert len(hp) > len(hf) >= 15
    for name in ('blob_connection_txt', 'blob_transaction_txt',
                 'blob_importexport_txt', 'blob_basic_txt',
                 'IExternalGC_test'):
        assert name in hf and name in hp, name
    assert 'blob_packing_txt' in hp
    assert any('BlobUndoTests' in key for key in hp)
