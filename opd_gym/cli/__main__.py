"""`python -m opd_gym.cli`: the `opd-gym` command."""

from opd_gym.cli.main import run

run()
