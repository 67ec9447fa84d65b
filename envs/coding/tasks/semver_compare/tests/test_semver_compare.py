import pytest
from semver import compare_versions


def test_core_numbers_compare_numerically():
    assert compare_versions("1.0.0", "2.0.0") == -1
    assert compare_versions("2.10.0", "2.9.9") == 1
    assert compare_versions("1.2.3", "1.2.3") == 0


def test_prerelease_is_lower():
    assert compare_versions("1.0.0-alpha", "1.0.0") == -1
    assert compare_versions("1.0.0", "1.0.0-rc.1") == 1


def test_prerelease_ordering_chain():
    chain = [
        "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
        "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0",
    ]
    for low, high in zip(chain, chain[1:], strict=False):
        assert compare_versions(low, high) == -1, (low, high)
        assert compare_versions(high, low) == 1, (high, low)


def test_build_metadata_ignored():
    assert compare_versions("1.0.0+build.5", "1.0.0+other") == 0
    assert compare_versions("1.0.0-rc.1+x", "1.0.0-rc.1") == 0


def test_invalid():
    for bad in ["1.2", "1.2.x", "", "a.b.c", "1.2.3.4"]:
        with pytest.raises(ValueError):
            compare_versions(bad, "1.0.0")
