"""The plain-pytest reference moved into the package (`opd_gym.grading.plain`), where
`opd-gym tasks check-suite` uses it; tests and benchmarks keep importing it from here."""

from opd_gym.grading.plain import (  # noqa: F401
    AGENT_USER,
    REPORT,
    PlainRun,
    container,
    exec_pytest,
    outcomes_from_reportlog,
    put_files,
    run_plain,
)
