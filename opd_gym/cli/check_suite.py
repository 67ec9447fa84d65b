"""`opd-gym tasks check-suite SDIST...`: grade projects' own test suites and compare every
test id with plain pytest; a table, and with `--json` every id's verdicts."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from opd_gym.cli import options
from opd_gym.cli.errors import UserError

SUMMARY = ("grade projects' own test suites (sdists) and compare every test id with plain "
           "pytest: a table")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sdists", nargs="+", metavar="SDIST",
                        help="an sdist (.tar.gz or .zip) whose tests are in it")
    parser.add_argument("--tests", action="append", metavar="DIR",
                        help="the suite's folder or file (repeatable; default: found from "
                        "the ids plain pytest collects)")
    parser.add_argument("--timeout", type=options.seconds, default=300.0,
                        help="seconds each grading run may take (default 300)")
    parser.add_argument("--setup", action="append", metavar="CMD",
                        help="a step that builds the image both runs use (offline, as root, "
                        "the setup cache at /opd-cache): the suite's plugins and test "
                        "dependencies, e.g. 'pip install --no-index --find-links /opd-cache "
                        "freezegun'; repeatable")
    options.setup_cache(parser)
    parser.add_argument("--json", metavar="FILE",
                        help="also write every id's verdicts (plain pytest's, the grader's, "
                        "the scoring rule that decided whether it earns) and each suite's "
                        "figures to FILE")
    parser.add_argument("--pytest-options", metavar="OPTIONS",
                        help="options the project passes outside its pytest config (tox's "
                        "command line, CI scripts), e.g. --pytest-options=--doctest-modules")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from opd_gym.grading import Grader
    from opd_gym.grading.suite_check import check_project, prepare, table
    from opd_gym.sandboxes import make_pool
    from opd_gym.sandboxes.image import DEFAULT_IMAGE
    from opd_gym.tasks.sdist import read_sdist

    sdists = [read_sdist(Path(p)) for p in args.sdists]  # refuses an unreadable one first
    pytest_options = parse_pytest_options(args.pytest_options)
    image = suite_image(args.setup, args.setup_cache) if args.setup else DEFAULT_IMAGE
    checks = []
    with make_pool({"backend": "docker", "image": image}, size=2) as pool:
        grader = Grader(pool)
        for sdist in sdists:
            project = prepare(f"{sdist.name}-{sdist.version}", sdist.files, image,
                              options=pytest_options)
            check = check_project(project, grader, image, test_dirs=args.tests,
                                  timeout=args.timeout)
            checks.append(check)
            print(f"[check-suite] {check.name}: {check.agree}/{check.ids} ids agree",
                  flush=True)
    print(table(checks))
    if args.json:
        write_json(Path(args.json), {"suites": [c.to_dict() for c in checks]})
        print(f"[check-suite] per-id verdicts written to {args.json}")
    bad = [c for c in checks if not c.ok]
    if bad:
        print(f"{len(bad)} of {len(checks)} suites fail the check (plain pytest's verdicts, and "
              "a grade of 1.0 with earning tests for the unmodified code):")
        for check in bad:
            print(f"  {check.name}: {'; '.join(check.problems)}")
        return 1
    print(f"{len(checks)} of {len(checks)} suites agree with plain pytest, and the unmodified "
          "code of each scores 1.0")
    return 0


def write_json(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, whole or not at all (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(partial, path)


def parse_pytest_options(text: str | None) -> list[str]:
    """`--pytest-options` as words, test paths and outcome-hiding options refused."""
    import shlex

    from opd_gym.tasks.pytest_config import options_only

    if not text:
        return []
    try:
        return options_only(shlex.split(text), "--pytest-options")
    except ValueError as exc:  # a DatasetError, or shlex's unbalanced quote
        raise UserError(f"--pytest-options: {exc}") from None


def suite_image(setup: list[str], cache: str | None) -> str:
    """The environment image `setup` builds on the sandbox image (offline, `cache` at
    /opd-cache): what the suites' dependencies and plugins need, for both runs."""
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import EnvironmentSpec, ImageCache
    from opd_gym.sandboxes.image import DEFAULT_IMAGE
    from opd_gym.tasks.libraries import sdist_cache

    spec = EnvironmentSpec(setup=tuple(setup), base=DEFAULT_IMAGE,
                           cache_dir=Path(cache) if cache else sdist_cache())
    report = ImageCache(DockerEngine()).ensure(spec)
    print(f"[check-suite] environment image {report.tag} "
          f"({'built' if report.built else 'found'}, {len(setup)} setup step(s))", flush=True)
    return report.tag


__all__ = ["SUMMARY", "add_arguments", "run"]
