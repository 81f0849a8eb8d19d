"""Investigations above measurement, in rooms by job (docs/architecture.md draws the map):

- the base, what every room reads: case.py (what the API face opened), answers.py (answers stored beside their runs,
  and which of them may be reused), release_notes.py (JAX's CHANGELOG.md);
- search/: the searches over builds (releases, nightlies, commits, the windows of changes);
- minimize/: minimize and isolate, a function's ops cut into modules of their own;
- explain/: explain and its experiments, what restores the last good release;
- report/: the issue body, the table of changes, the reproducers, the newest release;
- chain.py: `investigate`, the steps above one after another.

Each room imports only the base and the rooms before it in this list; none imports the chain (tests/test_layers.py).
"""
