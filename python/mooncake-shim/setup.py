"""The shim's version is kvfabric's (VERSION at the repository root), and it
requires exactly that kvfabric: the facade it re-exports is kvfabric's own
module, so the two are released together."""

import os

from setuptools import setup

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "VERSION")) as f:
    VERSION = f.read().strip()

setup(version=VERSION, install_requires=[f"kvfabric=={VERSION}"])
