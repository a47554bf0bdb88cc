"""Build step of the wheel: everything else is in pyproject.toml.

The models (sql/), suites (expectations/), example runs (examples/runs/) and the analyst guide
stay at the top level of the repository (the design card); the wheel carries copies under
``warehouse/_data/``, so that ``pip install profile-warehouse`` (or a Dagster code location
installed from the wheel) has them. Which files: ``warehouse/shipped.py`` (globs: a new model
or suite is shipped without a list to edit); where a running pwh finds them:
``warehouse.shipped.data_path``. Editable installs read the checkout and copy nothing.
"""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _shipped():
    # by file path: importing the warehouse package would need its dependencies at build time
    spec = importlib.util.spec_from_file_location("_pwh_shipped", ROOT / "warehouse" / "shipped.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithData(build_py):
    """build_py, then the shipped data copied to <build_lib>/warehouse/_data/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "warehouse" / "_data"
        if target.exists():
            shutil.rmtree(target)  # a file removed from the repository leaves the wheel too
        files = _shipped().files_to_ship(ROOT)
        if not files:
            raise SystemExit(f"setup.py: none of the shipped data found under {ROOT}")
        for src, rel in files:
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)

    def get_outputs(self, include_bytecode=1):
        out = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            base = Path(self.build_lib) / "warehouse" / "_data"
            out += [str(base / rel) for _, rel in _shipped().files_to_ship(ROOT)]
        return out


setup(cmdclass={"build_py": BuildPyWithData})
