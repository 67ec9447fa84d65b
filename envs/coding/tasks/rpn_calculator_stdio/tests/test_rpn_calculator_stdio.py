from opd_grading import run as run_program


def run(stdin):
    proc = run_program(["python3", "main.py"], stdin=stdin, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def test_simple():
    assert run("3 4 +\n") == ["7"]
    assert run("5 1 2 + 4 * + 3 -\n") == ["14"]


def test_negative_numbers_and_truncation():
    assert run("-7 2 /\n7 -2 /\n-3 -4 *\n") == ["-3", "-3", "12"]


def test_errors_do_not_stop_processing():
    assert run("1 +\n2 0 /\n1 2 3 +\n4 x *\n6 3 /\n") == ["error"] * 4 + ["2"]


def test_blank_lines_skipped():
    assert run("\n  \n10 2 -\n\n") == ["8"]


def test_big_numbers():
    assert run("123456789123 1000 *\n") == ["123456789123000"]
