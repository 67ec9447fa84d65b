import calendar
import datetime

from dates import day_of_year, days_in_month, is_leap_year


def test_ordinary_leap_years():
    assert is_leap_year(2024) is True
    assert is_leap_year(2023) is False


def test_century_rules():
    assert is_leap_year(1900) is False
    assert is_leap_year(2000) is True
    assert is_leap_year(2100) is False


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29


def test_days_in_month_matches_calendar():
    for year in (1, 1600, 1700, 1999, 2000, 2024, 9999):
        for month in range(1, 13):
            assert days_in_month(year, month) == calendar.monthrange(year, month)[1]


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 12, 31) == 365
    assert day_of_year(2024, 3, 1) == 61


def test_day_of_year_matches_datetime():
    for year in (1900, 2000, 2023):
        date = datetime.date(year, 1, 1)
        while date.year == year:
            assert day_of_year(date.year, date.month, date.day) == date.timetuple().tm_yday
            date += datetime.timedelta(days=7)
