"""A recipe file (`prep samples --recipe FILE`): a .py defining FIELDS and make(input)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prep.run.errors import PrepError, UsageError


def load_recipe(path: Path) -> tuple[Callable[[Any], Any], dict[str, Any]]:
    """FILE's make and FIELDS. The module is pickled by value, so worker processes (loky,
    Dask) need not import it by name."""
    if not path.is_file() or path.suffix != ".py":
        raise UsageError(f"--recipe {path}: not a .py file. HINT: a file defining FIELDS and make")
    name = f"prep_recipe_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code
        raise PrepError(f"{path}: running it raised {type(e).__name__}: {e}") from e
    make, fields = getattr(module, "make", None), getattr(module, "FIELDS", None)
    if not callable(make) or not isinstance(fields, dict):
        raise UsageError(f"{path} must define FIELDS (a dict name -> field) and make(input)")
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return make, fields
