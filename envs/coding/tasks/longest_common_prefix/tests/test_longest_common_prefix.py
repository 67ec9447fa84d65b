from solution import longest_common_prefix


def test_common():
    assert longest_common_prefix(["flower", "flow", "flight"]) == "fl"


def test_none_common():
    assert longest_common_prefix(["dog", "racecar", "car"]) == ""


def test_empty_list():
    assert longest_common_prefix([]) == ""


def test_single_and_identical():
    assert longest_common_prefix(["alone"]) == "alone"
    assert longest_common_prefix(["same", "same"]) == "same"


def test_contains_empty_string():
    assert longest_common_prefix(["abc", "", "abd"]) == ""


def test_case_sensitive_and_whole_word():
    assert longest_common_prefix(["Apple", "apple"]) == ""
    assert longest_common_prefix(["inter", "internet", "interval"]) == "inter"
