"""The generated option reference matches component.xml."""
import os
import subprocess
import sys

DOCS = os.path.join(os.path.dirname(__file__), '..', 'docs')


def test_option_reference_is_current():
    result = subprocess.run(
        [sys.executable, os.path.join(DOCS, 'gen_options.py'), '--check'],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
