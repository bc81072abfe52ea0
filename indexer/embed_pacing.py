"""How a batch of upserts that may give way to a revocation paces its embedding calls (IndexSink.embed_upserts).

Apart from the sink because it is one idea, with its own figures: a worker holding a batch embeds it
in calls short enough that a revocation arriving meanwhile waits for one call at most.
"""

from __future__ import annotations


class Preempted(Exception):
    """embed_upserts stopped between two sub-batches because its `interrupt` asked it to."""


EMBED_SUB_BATCH = 32
"""Texts per embedding call inside a batch at most: the model's own batch size, so splitting costs
nothing."""

EMBED_CALL_BUDGET_S = 0.2
"""How long one embedding call of a batch that may give way (`interrupt`) should take: the longest a
revocation waits for it. 32 texts take about 0.1 s of CPU, but the worker's share of a contended CPU
is a fraction of that: at a load average of 20 one call of 32 took seconds, and a revocation on the
embedded profile waited for it (converged 5 s p50, 11 s p99). So the calls shrink to what fits."""


EMBED_FIRST_CALL = 8
"""Texts in the first call of a pass that may give way, whatever pace the last pass showed: that pace
is from another moment. A batch begun just as four busy processes started made its first call at
the quiet machine's 32 texts and took 2.7 s, which every revocation published meanwhile waited for."""


PREPARE_CHECK_EVERY = 16
"""Events chunked between two looks at `interrupt` while a batch that may give way is prepared."""


def sub_batch_size(texts: int, seconds: float) -> int:
    """Texts for the next call, given that the last one embedded `texts` in `seconds`: as many as fit
    EMBED_CALL_BUDGET_S at that pace, between 1 and EMBED_SUB_BATCH. Pure."""
    if texts <= 0 or seconds <= 0:
        return EMBED_SUB_BATCH
    return max(1, min(EMBED_SUB_BATCH, int(EMBED_CALL_BUDGET_S * texts / seconds)))
