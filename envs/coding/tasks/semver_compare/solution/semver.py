import re

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def _key(version):
    match = _VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"not a semantic version: {version!r}")
    core = tuple(int(part) for part in match.group(1, 2, 3))
    if match.group(4) is None:
        return core, (1,)
    ids = [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in match.group(4).split(".")]
    return core, (0, ids)


def compare_versions(a, b):
    ka, kb = _key(a), _key(b)
    return (ka > kb) - (ka < kb)
