"""Static HTML trajectory viewer: `write_report(run_dir)` renders a run as one offline file."""

from opd_gym.viewer.report import REPORT, render_report, write_report
from opd_gym.viewer.run import Episode, Run, load_run
from opd_gym.viewer.tokens import load_tokenizer

__all__ = [
    "REPORT",
    "Episode",
    "Run",
    "load_run",
    "load_tokenizer",
    "render_report",
    "write_report",
]
