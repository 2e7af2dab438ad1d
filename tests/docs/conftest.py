from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import pytest

#: The docs speak of the reader's project, where the example app is the top-level ``shop``;
#: in the test project it is ``testproject.shop``. The same modules answer to both names.
EXAMPLE_APP = ("shop", "testproject.shop", ("models", "payments", "jobs", "views", "urls"))


@pytest.fixture
def example_app_as_in_the_docs() -> Iterator[None]:
    alias, real, modules = EXAMPLE_APP
    added = {alias: importlib.import_module(real)}
    added.update({f"{alias}.{name}": importlib.import_module(f"{real}.{name}") for name in modules})
    missing = {name: module for name, module in added.items() if name not in sys.modules}
    sys.modules.update(missing)
    yield
    for name in missing:
        del sys.modules[name]
