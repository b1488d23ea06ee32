"""ZODB's storage conformance suite, on every backend and history mode.

Each test method of ZODB's mixins (see conformance.py) is one parametrized
test here; the terminal summary prints how many ran per suite.
"""
import pytest

import conformance as c

SUITES = {
    'hf': [c.HistoryFreeCase, c.ZODBHistoryFreeCase],
    'hp': [c.HistoryPreservingCase, c.ZODBHistoryPreservingCase,
           c.RecoveryOursToOursCase, c.RecoveryFileStorageToOursCase,
           c.RecoveryOursToFileStorageCase],
}


def _params(mode):
    return [pytest.param(case, name, id=f'{case.__name__}.{name}')
            for case in SUITES[mode] for name in c.test_names(case)]


def test_collected_every_mixin_method():
    # ZODB 6 renamed check* to test*; make sure the methods were found.
    for cases in SUITES.values():
        for case in cases:
            assert len(c.test_names(case)) >= 3, case


@pytest.mark.parametrize('case, name', _params('hp'))
def test_history_preserving(backend, case, name):
    c.run(case, name, backend)


@pytest.mark.parametrize('case, name', _params('hf'))
def test_history_free(backend, case, name):
    c.run(case, name, backend)
