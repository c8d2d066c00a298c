"""The storage engine never imports Ray, so it runs and is tested in any process."""

import subprocess
import sys


def test_importing_every_storage_module_does_not_load_ray():
    code = (
        "import sys, pkgutil, importlib, raylog.storage as s\n"
        "for m in pkgutil.iter_modules(s.__path__): importlib.import_module('raylog.storage.' + m.name)\n"
        "import raylog.config, raylog.errors\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
