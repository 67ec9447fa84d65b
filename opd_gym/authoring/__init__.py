"""Task authoring, offline: synthesizing bugs in real projects (`synth`, `synth_workers`,
`synth_cli`), writing and checking their statements (`statements`, `restate`), checking that a
dataset's tests pay for solving it (`validate`) and generating the `repo` suite
(`repo_suite`). Loading tasks (`opd_gym.tasks`) imports none of it.
"""
