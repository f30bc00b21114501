"""One `--eval-every` evaluation (`HeldOutEvaluation.run`) as one process or as a rank under
torchrun (gloo on the CPU), with a real tiny Llama and an evaluation whose verdicts depend only
on the seed, so one process and two must agree. `test_many_processes.py` runs it.

    python tests/distributed_held_out.py OUT_DIR EPISODES FAIL_RANK

Each rank writes OUT_DIR/rank<r>.json: the seeds it played per task and the entry it logged.
FAIL_RANK: the rank whose evaluation raises (-1: none).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import LlamaConfig, LlamaForCausalLM

from envharness.integrations.trl import ranks
from envharness.integrations.trl.held_out import HeldOutEvaluation


def main(out: Path, episodes: int, fail_rank: int) -> None:
    ranks.join()
    played: dict[str, list[int]] = {}

    def evaluate(model, task, seeds):
        if ranks.rank() == fail_rank:
            raise RuntimeError("the environment server went away")
        played.setdefault(task, []).extend(seeds)
        wins = [s % 3 == 0 for s in seeds] if task == "a" else [s < 2 for s in seeds]
        return sum(wins) / len(wins)

    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=64)  # fmt: skip
    held_out = HeldOutEvaluation(evaluate, every=1, tasks=["a"], transfer=["b"], episodes=episodes, out=out)
    entry = held_out.run(LlamaForCausalLM(config), step=1)
    (out / f"rank{ranks.rank()}.json").write_text(json.dumps({"played": played, "entry": entry}))
    ranks.leave()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
