"""A package's lazily exported names (advcli.plugins.lazy_exports) are never also the names of its submodules:
once such a submodule is imported (the server's preload imports every module) the package attribute is the
module, and a caller of the function gets "'module' object is not callable" (advcli inspect did, through the
server)."""
import importlib
import pkgutil

import pytest


@pytest.mark.parametrize("package", ["advcli.formats", "advcli.pipeline"])
def test_no_lazy_export_is_named_as_a_submodule(package):
    pkg = importlib.import_module(package)
    names = pkg.__getattr__.names
    assert names, package
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    assert not set(names) & submodules


def test_every_lazy_export_is_what_it_names_after_every_module_is_imported():
    """As the server leaves them: every advcli module imported, then each lazy name read from its package."""
    import advcli
    from advcli.server.daemon import SKIP_PRELOAD

    for m in pkgutil.walk_packages(advcli.__path__, "advcli."):
        if not m.name.startswith(SKIP_PRELOAD):
            try:
                importlib.import_module(m.name)
            except ImportError:  # an optional extra (ray, triton): as the preload skips it
                pass
    for package in ("advcli.formats", "advcli.pipeline"):
        pkg = importlib.import_module(package)
        for name in pkg.__getattr__.names:
            assert not isinstance(getattr(pkg, name), type(pkg)), f"{package}.{name} is a module"
