import itertools
import re


def encode(text):
    return "".join(f"{len(list(run))}{ch}" for ch, run in itertools.groupby(text))


def decode(data):
    return "".join(ch * int(count) for count, ch in re.findall(r"(\d+)(\D)", data))
