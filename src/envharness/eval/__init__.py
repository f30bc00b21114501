"""Evaluating models on an environment's tasks: `envharness eval` and its parts.

- `config.py`: `EvalConfig`, the default task set; `runner.py`: `run_eval` (episodes through
  the harness, many at once, resumable); `episode.py`: per-step prompts and the step tape
  (screenshots); the prompts come from `envharness.prompts`; `stats.py`: success rates with
  Wilson intervals; `report.py` (HTML), `plot.py` (PNG), `compare.py` (two runs side by side);
  `runfolder.py`: the run folder's layout.
"""

from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.eval.runner import EvalResult, run_eval, run_eval_async
from envharness.eval.stats import TaskStats, summarize, wilson_interval
from envharness.prompts.text import PromptContext, StepSummary, load_prompt_builder

__all__ = [
    "EvalConfig",
    "EvalResult",
    "EvalSetupError",
    "PromptContext",
    "StepSummary",
    "TaskStats",
    "load_prompt_builder",
    "run_eval",
    "run_eval_async",
    "summarize",
    "wilson_interval",
]
