from logstats import busiest_component, count_levels

LOG = """\
2024-03-01 12:00:05 INFO [web] started
2024-03-01 12:00:06 ERROR [db] connection lost
2024-03-01 12:00:07 WARNING [web] slow request: 2.5s
this line is garbage
2024-03-01 12:00:08 ERROR [cache] miss storm
2024-03-01 12:00:09 ERROR [db] connection lost again

2024-03-01 12:00:10 FATAL [db] not a known level
2024-03-01 12:00:11 DEBUG [web]
2024-03-01 12:00:12 INFO web no brackets
2024-03-01 12:00
"""


def _write(tmp_path, text, name="app.log"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_count_levels(tmp_path):
    assert count_levels(_write(tmp_path, LOG)) == {"INFO": 1, "ERROR": 3, "WARNING": 1, "DEBUG": 1}


def test_busiest_component(tmp_path):
    assert busiest_component(_write(tmp_path, LOG)) == "db"


def test_ties_and_no_errors(tmp_path):
    tie = "2024-01-01 00:00:00 ERROR [zeta] x\n2024-01-01 00:00:01 ERROR [alpha] y\n"
    assert busiest_component(_write(tmp_path, tie)) == "alpha"
    quiet = "2024-01-01 00:00:00 INFO [zeta] fine\n"
    assert busiest_component(_write(tmp_path, quiet, "quiet.log")) is None


def test_empty_file(tmp_path):
    path = _write(tmp_path, "")
    assert count_levels(path) == {}
    assert busiest_component(path) is None


def test_large_file(tmp_path):
    lines = [f"2024-01-01 00:00:{i % 60:02d} INFO [svc{i % 7}] tick {i}" for i in range(20000)]
    lines.append("2024-01-01 00:00:00 ERROR [svc3] boom")
    path = _write(tmp_path, "\n".join(lines) + "\n")
    assert count_levels(path) == {"INFO": 20000, "ERROR": 1}
    assert busiest_component(path) == "svc3"
