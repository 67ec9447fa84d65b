import os


def longest_common_prefix(strs):
    return os.path.commonprefix(list(strs)) if strs else ""
