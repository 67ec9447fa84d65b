from solution import group_anagrams


def _canon(groups):
    return sorted(sorted(group) for group in groups)


def test_example_grouping():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert _canon(group_anagrams(words)) == _canon([["eat", "tea", "ate"], ["tan", "nat"], ["bat"]])


def test_exact_order():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert group_anagrams(words) == [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]]


def test_empty_inputs():
    assert group_anagrams([]) == []
    assert group_anagrams([""]) == [[""]]


def test_duplicates_and_case():
    assert group_anagrams(["ab", "ba", "ab", "Ab"]) == [["ab", "ba", "ab"], ["Ab"]]


def test_same_letters_different_counts():
    assert _canon(group_anagrams(["aab", "abb", "bab"])) == [["aab"], ["abb", "bab"]]
