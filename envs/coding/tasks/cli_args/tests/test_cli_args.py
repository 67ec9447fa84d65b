from opd_grading import run as run_program


def run(*args):
    return run_program(["python3", "greet.py", *args], timeout=10)


def test_default_greeting():
    proc = run("Ada")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["Hello, Ada!"]


def test_several_names_and_greeting():
    proc = run("Ada", "Linus", "--greeting", "Hi")
    assert proc.stdout.splitlines() == ["Hi, Ada!", "Hi, Linus!"]


def test_shout_and_repeat():
    proc = run("--shout", "--repeat", "2", "bo", "cy")
    assert proc.stdout.splitlines() == ["HELLO, BO!", "HELLO, BO!", "HELLO, CY!", "HELLO, CY!"]


def test_bad_repeat_is_usage_error():
    for value in ("0", "-1", "two"):
        proc = run("x", "--repeat", value)
        assert proc.returncode == 2, value
        assert "usage" in proc.stderr.lower()
        assert proc.stdout == ""


def test_missing_name_is_usage_error():
    proc = run()
    assert proc.returncode == 2
    assert "usage" in proc.stderr.lower()


def test_help():
    proc = run("--help")
    assert proc.returncode == 0
    assert "--shout" in proc.stdout and "--repeat" in proc.stdout
