"""The `opd-gym` command line, one module per command (`commands.COMMANDS` names them), the
flags several commands share defined once in `options`.

`main` runs one command; `opd-gym --help` imports no command module, and a command imports
only its own.
"""

from opd_gym.cli.errors import UserError
from opd_gym.cli.main import build_parser, main, run

__all__ = ["UserError", "build_parser", "main", "run"]
