"""Entry point of a paritygate worker process (see paritygate.workers); run by path.

Reads one JSON request per line (``{"id", "target": "module:attr", "args", "kwargs"}``) and
writes one JSON answer per line (``{"id", "result"}`` or ``{"id", "error": {...}}``). The
protocol uses a duplicate of the original stdout; fd 1 is pointed at stderr so that whatever the
called code prints cannot corrupt it.

Starting a worker must be cheap: ``paritygate/__init__`` imports the comparison stack, which a
worker that only times a callable does not need. The package is therefore registered without
running its ``__init__``; its submodules import as usual, and the first access to an attribute of
the package itself runs the real ``__init__`` then.
"""

import importlib
import json
import os
import sys
import traceback
import types
from pathlib import Path


class _LazyPackage(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        init = self.__dict__["__file__"]
        self.__class__ = types.ModuleType  # once: from now on a plain module
        with open(init) as handle:
            exec(compile(handle.read(), init, "exec"), self.__dict__)
        return getattr(self, name)


def _install_package() -> None:
    here = Path(__file__).resolve().parent
    if "paritygate" in sys.modules:
        return
    package = _LazyPackage("paritygate")
    package.__file__ = str(here / "__init__.py")
    package.__path__ = [str(here)]
    package.__package__ = "paritygate"
    sys.modules["paritygate"] = package
    sys.path.insert(0, str(here.parent))


def _resolve(target):
    module_name, _, attr = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def serve() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            fn = _resolve(request["target"])
            text = json.dumps(
                {"id": request["id"], "result": fn(*request["args"], **request["kwargs"])}
            )
        except Exception as exc:  # reported to the caller; the worker stays up
            text = json.dumps(
                {
                    "id": request.get("id"),
                    "error": {
                        "type": type(exc).__name__,
                        "message": str(exc),
                        "traceback": traceback.format_exc(),
                    },
                }
            )
        protocol.write(text + "\n")


if __name__ == "__main__":
    sys.path[0:1] = []  # not this folder: its modules are paritygate's, imported as such
    _install_package()
    serve()
