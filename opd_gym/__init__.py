"""opd_gym: Gymnasium environments for LLM coding agents with on-policy distillation."""
