"""numba_ipc_cases.py: runs numba's own CUDA IPC tests
(numba.cuda.tests.cudapy.test_ipc) under the interpreter that has numba, in
the environment numba_run.py prepared (simulated driver, optionally the
shim), and writes one JSON record per test case to the file named by
argv[1]: id, outcome (pass, fail, error, skip), numba's skip reason, the
subtests that ran and the tracebacks of whatever failed.

numba's IPC tests spawn their children with multiprocessing ('spawn'):
they are fresh interpreters that inherit this environment.
"""
import json
import sys
import time
import traceback
import unittest

MODULE = "numba.cuda.tests.cudapy.test_ipc"


class Recorder(unittest.TestResult):
    """Collects one record per test method; subtests fold into it."""

    def __init__(self):
        super().__init__()
        self.cases = {}
        self.order = []

    def _case(self, test):
        key = test.id()
        if key not in self.cases:
            self.cases[key] = {"id": key, "outcome": "pass", "reason": "", "subtests": 0,
                               "subtests_failed": [], "details": [], "seconds": 0.0}
            self.order.append(key)
        return self.cases[key]

    def startTest(self, test):
        super().startTest(test)
        self._case(test)["started"] = time.monotonic()

    def stopTest(self, test):
        super().stopTest(test)
        case = self._case(test)
        case["seconds"] = round(time.monotonic() - case.pop("started", time.monotonic()), 2)

    def _fail(self, test, kind, err):
        case = self._case(test)
        if case["outcome"] != "error":
            case["outcome"] = kind
        case["details"].append("".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, "error", err)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, "fail", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        case = self._case(test)
        case["outcome"], case["reason"] = "skip", reason

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        case = self._case(test)
        case["outcome"], case["reason"] = "xfail", "expected failure"

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._case(test)["outcome"] = "fail"
        self._case(test)["details"].append("unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        case = self._case(test)
        case["subtests"] += 1
        if err is not None:
            case["subtests_failed"].append(subtest._subDescription())
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self._fail(test, kind, err)


def main():
    out = sys.argv[1]
    suite = unittest.defaultTestLoader.loadTestsFromName(MODULE)
    result = Recorder()
    suite.run(result)
    # Module-level failures (setUpClass, import) have no case of their own.
    for test, err in result.errors:
        if test.id() not in result.cases:
            result.cases[test.id()] = {"id": test.id(), "outcome": "error", "reason": "",
                                       "subtests": 0, "subtests_failed": [],
                                       "details": [err], "seconds": 0.0}
            result.order.append(test.id())
    with open(out, "w") as f:
        json.dump([result.cases[k] for k in result.order], f)


if __name__ == "__main__":
    main()
