"""The documentation: the generated option reference matches component.xml,
and Sphinx builds every page with warnings as errors."""
import os
import subprocess
import sys

import pytest

DOCS = os.path.join(os.path.dirname(__file__), '..', 'docs')


def test_option_reference_is_current():
    result = subprocess.run(
        [sys.executable, os.path.join(DOCS, 'gen_options.py'), '--check'],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_sphinx_builds_without_warnings(tmp_path):
    # The test extra installs Sphinx, so CI always runs this.
    pytest.importorskip('sphinx')
    result = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q',
         '-b', 'html', DOCS, str(tmp_path / 'html')],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / 'html' / 'index.html').exists()
    assert (tmp_path / 'html' / 'options.html').exists()
