"""The package's version.

Its one source is VERSION at the repository root, which also versions the
kvfabric binary and libkvfabric.so. Run from a checkout (PYTHONPATH=python)
this module reads that file; an installed package has this module replaced
by setup.py with the literal version it was built with.
"""


def _checkout_version() -> str:
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "VERSION")
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "0+unknown"


__version__ = _checkout_version()
