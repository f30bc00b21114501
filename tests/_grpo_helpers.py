"""What the GRPO exactness tests share: a reward that always differs, and runs of a mask."""


def reply_length(completions, **kwargs):
    """Gives the group different rewards even when no episode succeeds (a random model)."""
    return [float(len(c)) for c in completions]


def runs(mask: list[int], value: int) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of `value` in `mask`."""
    out, start = [], None
    for i, m in enumerate([*mask, None]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out
