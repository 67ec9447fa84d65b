from solution import fizzbuzz


def test_first_fifteen():
    assert fizzbuzz(15) == [
        "1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
        "11", "Fizz", "13", "14", "FizzBuzz",
    ]


def test_one():
    assert fizzbuzz(1) == ["1"]


def test_empty():
    assert fizzbuzz(0) == []
    assert fizzbuzz(-3) == []


def test_length_and_types():
    result = fizzbuzz(100)
    assert len(result) == 100
    assert all(isinstance(item, str) for item in result)
    assert result[89] == "FizzBuzz"
    assert result[98] == "Fizz"
    assert result[99] == "Buzz"
