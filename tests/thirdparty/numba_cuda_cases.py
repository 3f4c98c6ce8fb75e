"""numba_cuda_cases.py: runs numba-cuda's own CUDA test suite
(numba.cuda.tests, from PyPI's numba-cuda) under the venv's interpreter, in
the environment numba_cuda_run.py prepared (simulated driver, optionally
the shim), one test module at a time (numba_cuda_run.py starts one process
per module, so that a crash costs one module), and writes one JSON record
per test case to the file named by argv[1], as numba_ipc_cases.py does: id,
outcome (pass, fail, error, skip, xfail), the skip reason, subtests and
tracebacks.

numba-cuda runs its suite with pytest and a conftest.py of its repository,
which the wheel does not ship; its tests are unittest classes, so they run
here with unittest. A module whose import fails (a package the venv lacks,
pytest.importorskip) is one record, "MODULE (module)", with its reason. Children that
numba-cuda's tests spawn re-import this file: main() runs only as __main__.
"""
import importlib
import json
import pkgutil
import sys
import traceback
import unittest

from numba_ipc_cases import Recorder

PACKAGE = "numba.cuda.tests"


def module_record(name, err):
    """The record of a test module that could not be imported."""
    skipped = type(err).__name__ == "Skipped"  # pytest.importorskip / pytest.skip
    return {"id": name + " (module)", "outcome": "skip" if skipped else "error",
            "reason": "%s: %s" % (type(err).__name__, str(err).splitlines()[0] if str(err) else ""),
            "subtests": 0, "subtests_failed": [], "seconds": 0.0,
            "details": [] if skipped else ["".join(traceback.format_exception(err))]}


def modules():
    """The test modules of the package, by name (none imported)."""
    package = importlib.import_module(PACKAGE)
    return [m.name for m in pkgutil.walk_packages(package.__path__, PACKAGE + ".")
            if m.name.rsplit(".", 1)[-1].startswith("test_")]


def run_module(name):
    """The records of one test module's cases."""
    try:
        module = importlib.import_module(name)
    except BaseException as err:  # pytest's Skipped is not an Exception
        return [module_record(name, err)]
    result = Recorder()
    unittest.defaultTestLoader.loadTestsFromModule(module).run(result)
    # Failures outside a case (setUpClass) have no case of their own.
    for test, err in result.errors:
        if test.id() not in result.cases:
            result.cases[test.id()] = {"id": test.id(), "outcome": "error", "reason": "",
                                       "subtests": 0, "subtests_failed": [],
                                       "details": [err], "seconds": 0.0}
            result.order.append(test.id())
    return [result.cases[k] for k in result.order]


def main():
    """numba_cuda_cases.py OUT --list: the package's test modules, as a JSON
    list; numba_cuda_cases.py OUT MODULE: that module's records."""
    out, what = sys.argv[1], sys.argv[2]
    found = modules() if what == "--list" else run_module(what)
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
