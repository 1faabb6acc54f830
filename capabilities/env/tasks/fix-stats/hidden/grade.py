"""Hidden tests of fix-stats: prints the fraction that pass, last."""
import os
import sys

sys.path.insert(0, os.getcwd())
sys.dont_write_bytecode = True

checks = []


def check(name):
    def wrap(fn):
        checks.append((name, fn))
        return fn
    return wrap


def raises(fn, exc):
    try:
        fn()
    except exc:
        return True
    except Exception:
        return False
    return False


@check("mean")
def _():
    import stats
    return stats.mean([1, 2, 3, 4]) == 2.5 and stats.mean([-1.5]) == -1.5


@check("mean of nothing")
def _():
    import stats
    return raises(lambda: stats.mean([]), ValueError)


@check("median odd")
def _():
    import stats
    return stats.median([5, 1, 3]) == 3


@check("median even")
def _():
    import stats
    return stats.median([4, 1, 3, 2]) == 2.5


@check("median of nothing")
def _():
    import stats
    return raises(lambda: stats.median([]), ValueError)


@check("mode")
def _():
    import stats
    return stats.mode([3, 1, 3, 2]) == 3


@check("mode tie")
def _():
    import stats
    return stats.mode([2, 1, 2, 1, 5]) == 1


passed = 0
for name, fn in checks:
    try:
        ok = bool(fn())
    except Exception as e:
        print(f"{name}: {type(e).__name__}: {e}")
        ok = False
    print(f"{name}: {'ok' if ok else 'FAIL'}")
    passed += ok
print(passed / len(checks))
