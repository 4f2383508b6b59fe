# Tests the installed package when there is one (a venv with `pip install ./python`), else the
# package in the source tree, which then finds the library in build/lib.
import importlib.util
import pathlib
import sys

if importlib.util.find_spec("hetero") is None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
