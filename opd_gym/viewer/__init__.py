"""Static HTML trajectory viewer: `write_report(run_dir)` renders a run as one offline file,
`write_compare(run_dirs)` two or more runs side by side."""

from opd_gym.viewer.compare import render_compare, write_compare
from opd_gym.viewer.report import REPORT, render_report, write_report
from opd_gym.viewer.run import Episode, Run, load_run
from opd_gym.viewer.tokens import load_tokenizer

__all__ = [
    "REPORT",
    "Episode",
    "Run",
    "load_run",
    "load_tokenizer",
    "render_compare",
    "render_report",
    "write_compare",
    "write_report",
]
