"""The toy mechanism study's modules (``studies/mechanism/``: a folder beside the package, not a package) import
each other by name, as when ``run.py`` runs; its tests import them the same way."""

import sys

from helpers import REPO

STUDY = REPO / "studies" / "mechanism"
if str(STUDY) not in sys.path:
    sys.path.insert(0, str(STUDY))
