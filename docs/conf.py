"""Sphinx configuration of relstorage's documentation.

    .venv/bin/pip install -e '.[docs]'
    .venv/bin/sphinx-build -W -b html docs docs/_build/html

tests/test_docs.py builds it with warnings as errors when Sphinx is
installed (CI installs it: the test extra includes it).
"""
project = 'relstorage'
author = 'The relstorage developers'
copyright = '2026, the relstorage developers'  # noqa: A001 (Sphinx's name)
extensions = []
exclude_patterns = ['_build']
master_doc = 'index'
html_theme = 'alabaster'
# The pages show SQL, shell and ZConfig, not Python, in their literal
# blocks: no highlighting guessed per block.
highlight_language = 'none'
