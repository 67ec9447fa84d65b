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


def test_usage_errors():
    """A bad --repeat or no name at all: exit code 2, usage on stderr, nothing on stdout."""
    for args in (("x", "--repeat", "0"), ("x", "--repeat", "-1"), ("x", "--repeat", "two"), ()):
        proc = run(*args)
        assert proc.returncode == 2, args
        assert "usage" in proc.stderr.lower(), args
        assert proc.stdout == "", args


def test_help():
    proc = run("--help")
    assert proc.returncode == 0
    assert "--shout" in proc.stdout and "--repeat" in proc.stdout
