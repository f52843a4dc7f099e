"""Which torch releases a libbload.so loads into: the series (major.minor) it was built against.

libbload.so links against libtorch's C++ API, which changes between minor releases (2.12 → 2.13)
and is kept within one (2.13.0 → 2.13.1). This file is the rule's one home: the wheel's
requirement on torch (pyproject.toml's dynamic dependencies, through
python/build_hooks/torch_requirement.py) and the check at import (bload._library) both use it.
It imports nothing, so that the build can load it without torch or bload.
"""


def series(version):
    """'2.13.0+cu130' -> (2, 13)."""
    parts = str(version).split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(
            f"torch version = {version!r}: expected MAJOR.MINOR[.PATCH][+LOCAL]"
        ) from None


def requirement(version):
    """The requirement a build against torch `version` puts on torch: its series,
    '2.13.0+cu130' -> 'torch>=2.13,<2.14'."""
    major, minor = series(version)
    return f"torch>={major}.{minor},<{major}.{minor + 1}"


def same_series(built, running):
    return series(built) == series(running)
