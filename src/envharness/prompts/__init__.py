"""Prompts: how an observation becomes the model's messages, in one place for eval and train.

A policy is evaluated on the prompt it was trained on, so `envharness eval` and
`envharness train` take their prompts from here.

    text.py     the per-step prompt (goal, URL, AXTree cut to a token budget, last steps, error)
    compact.py  the short conversation prompt for small models (goal + named elements)
"""
