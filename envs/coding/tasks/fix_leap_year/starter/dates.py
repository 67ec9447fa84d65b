"""Gregorian calendar helpers."""


def is_leap_year(year):
    """True if year has a February 29th."""
    return year % 4 == 0


def days_in_month(year, month):
    """Number of days in the given month (1-12) of year."""
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def day_of_year(year, month, day):
    """Ordinal of the date within its year, 1 for January 1st."""
    return sum(days_in_month(year, m) for m in range(1, month + 1)) + day
