from opd_grading import run as run_program


def run(stdin):
    proc = run_program(["python3", "main.py"], stdin=stdin, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_open_grid():
    assert run("3 3\n...\n...\n...\n") == "6"


def test_with_walls():
    assert run("3 4\n....\n.#..\n..#.\n") == "2"


def test_blocked_start_or_end():
    assert run("2 2\n#.\n..\n") == "0"
    assert run("2 2\n..\n.#\n") == "0"


def test_single_cell_and_line():
    assert run("1 1\n.\n") == "1"
    assert run("1 5\n.....\n") == "1"
    assert run("1 5\n..#..\n") == "0"


def test_large_grid_modulo():
    n = 300
    grid = "\n".join("." * n for _ in range(n))
    assert run(f"{n} {n}\n{grid}\n") == "764315181"
