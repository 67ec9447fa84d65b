"""Rewrite the committed `repo` suite's statements (`python -m opd_gym.authoring.restate restate`).

A manifest does not store the failure messages its statements are written from, so each
mutant's FAIL_TO_PASS tests run once more in the sandbox (`capture_failures`, cached beside
the sdists) and only the statements are rewritten (`restate_manifest`), every other byte kept.
Apart from `opd_gym.authoring.statements` (the writer and checker) so that module stays free of
the synthesis machinery it serves.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def capture_failures(records: Sequence[Mapping[str, Any]], workers: int = 2,
                     cache: Path | None = None) -> dict[str, dict[str, str]]:
    """Per task id, pytest's failure message per FAIL_TO_PASS id, from one sandbox run of the
    mutant's FAIL_TO_PASS tests (what a manifest does not store; resumable via `cache`)."""
    from opd_gym.authoring.synth import Bench, Mutation, project_from_library, run_suite
    from opd_gym.sandboxes import make_pool
    from opd_gym.tasks.libraries import library

    done: dict[str, dict[str, str]] = {}
    if cache is not None and cache.exists():
        done = json.loads(cache.read_text(encoding="utf-8"))
    projects = {name: project_from_library(library(name))
                for name in sorted({r["project"] for r in records})}
    lock = threading.Lock()
    local = threading.local()
    benches: list[Any] = []
    pool = make_pool("docker", size=workers)

    def one(record: Mapping[str, Any]) -> None:
        """Run one mutant's FAIL_TO_PASS tests on this thread's bench."""
        if record["id"] in done:
            return
        project = projects[record["project"]]
        bench = getattr(local, "bench", None)
        if bench is None or bench.project.name != project.name:
            if bench is not None:
                bench.close()
            bench = local.bench = Bench(project, pool)
            with lock:
                benches.append(bench)
        mutation = Mutation(**record["mutation"])
        original = project.workspace[mutation.path]
        sandbox = bench.ready()
        sandbox.write_files({mutation.path: mutation.apply(original.decode()).encode()})
        try:
            run = run_suite(sandbox, list(record["fail_to_pass"]), timeout=120.0)
        finally:
            sandbox.write_files({mutation.path: original})
        with lock:
            done[record["id"]] = {i: run.messages.get(i, "") for i in record["fail_to_pass"]}
            if cache is not None:
                cache.write_text(json.dumps(done, indent=0, sort_keys=True), encoding="utf-8")

    try:
        with ThreadPoolExecutor(max_workers=max(workers, 1)) as executor:
            list(executor.map(one, sorted(records, key=lambda r: r["id"])))
    finally:
        for bench in benches:
            bench.close()
        pool.close()
    return done


def restate_manifest(path: Path, failures: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Rewrite the statements of a one-task-per-line manifest (the `repo` suite's) in place,
    every other byte kept; returns the ids whose statement could not be written (kept)."""
    from opd_gym.authoring.synth import (
        Mutation,
        check_statement,
        project_from_library,
        read_manifest,
        write_statement,
    )
    from opd_gym.tasks.libraries import library

    # PASS_TO_PASS as the records mean it (a compact record stores only what it lacks)
    guarding = {r["id"]: r["pass_to_pass"] for r in read_manifest(path)["tasks"]}
    projects: dict[str, Any] = {}
    failed: list[str] = []
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        body = line.rstrip("\n")
        comma = body.endswith(",")
        try:
            record = json.loads(body.removesuffix(","))
        except ValueError:
            out.append(line)
            continue
        if not isinstance(record, dict) or "mutation" not in record:
            out.append(line)
            continue
        if json.dumps(record, sort_keys=True, separators=(",", ":")) != body.removesuffix(","):
            raise ValueError(f"{record.get('id')}: the manifest line does not round-trip")
        name = record["project"]
        project = projects.get(name) or projects.setdefault(
            name, project_from_library(library(name)))
        mutation = Mutation(**record["mutation"])
        messages = failures.get(record["id"], {})
        f2p = record["fail_to_pass"]
        statement = write_statement(project, mutation, [messages.get(i, "") for i in f2p], f2p)
        if not statement or check_statement(project, mutation, statement,
                                             f2p + guarding[record["id"]]):
            failed.append(record["id"])
            out.append(line)
            continue
        record["statement"] = statement
        out.append(json.dumps(record, sort_keys=True, separators=(",", ":"))
                   + ("," if comma else "") + line[len(body):])
    path.write_text("".join(out), encoding="utf-8")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    """`restate`: capture the failures of the committed `repo` suite's mutants in the sandbox
    (one run of each task's FAIL_TO_PASS tests) and rewrite only its statements."""
    import argparse

    from opd_gym.tasks.libraries import sdist_cache
    from opd_gym.tasks.repo_suite import manifest_path

    parser = argparse.ArgumentParser(prog="python -m opd_gym.authoring.restate")
    sub = parser.add_subparsers(dest="command", required=True)
    restate = sub.add_parser("restate")
    restate.add_argument("--workers", type=int, default=2)
    restate.add_argument("--manifest", type=Path, default=None)
    args = parser.parse_args(argv)
    path = args.manifest or Path(__file__).resolve().parents[2] / "envs" / "repo" / \
        "manifest.json"
    if not path.exists():
        path = manifest_path()
    records = json.loads(path.read_text(encoding="utf-8"))["tasks"]
    cache = sdist_cache().parent / "synth" / "repo.failures.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    failures = capture_failures(records, args.workers, cache)
    failed = restate_manifest(path, failures)
    for task in failed:
        print(f"[restate] {task}: no statement passes the checker (kept as it was)")
    print(f"[restate] {len(records) - len(failed)}/{len(records)} statement(s) rewritten "
          f"in {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
