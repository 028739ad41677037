"""Execution-time predictor: how long one engine step of a given composition takes.

The target model's step comes from the step formula of its
:class:`~servopt.costmodels.roofline.StepCostModel` (:meth:`~servopt.costmodels.roofline.StepCostModel.step_s`
on Python numbers, because the event loop times one step at a time), the engine's CPU time included.
With speculative decoding every step also pays the drafter: ``g`` sequential drafting passes over the
decoding sequences (no CPU time of their own: they run inside the same engine step).

Between events a decode-only batch is fixed, so its step time is a line in the batch's summed
context (:meth:`StepTimePredictor.decode_line`) and the engine advances many steps in closed form.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> from servopt.costmodels.roofline import StepCostModel
    >>> gpu = get_gpu("h100")
    >>> predictor = StepTimePredictor(StepCostModel(get_model("llama-3.1-8b"), gpu, PerformanceProfile.spec_default(gpu)))
    >>> line = predictor.decode_line(16, 16 * 1500.0, 16 * 1500.0)
    >>> abs(line.intercept_s + line.slope_s * 24000 - predictor.decode_s(16, 24000.0, 24000.0)) < 1e-12
    True
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..roofline import DecodeLine, StepCostModel, aggregates_from_arrays
from ..speculation import Speculation


class StepComposition(NamedTuple):
    """The sums a step's time depends on (one step, scalars). A named tuple: the event loop builds one
    per simulated step and copies its fields into the step's record."""

    num_decode_seqs: int
    decode_context: float
    decode_context_windowed: float
    prefill_tokens: int
    prefill_chunks: int
    prefill_pairs: float
    prefill_pairs_windowed: float
    prefill_kv_tokens: float
    prefill_kv_tokens_windowed: float


class StepTimePredictor:
    """Step times of one engine (one TP x PP model instance), target plus drafter."""

    def __init__(self, cost: StepCostModel, speculation: Speculation | None = None):
        self.cost = cost
        self.speculation = speculation
        self.query_per_seq = speculation.query_tokens_per_seq if speculation else 1
        self.tokens_per_step = speculation.tokens_per_verify if speculation else 1.0
        self.drafter = speculation.head.cost if speculation else None
        self.draft_passes = speculation.num_speculative_tokens if speculation else 0

    @property
    def window(self) -> int | None:
        """Sliding window of the target's windowed layers (None when every layer attends fully)."""
        model = self.cost.model
        return model.sliding_window if model.sliding_window and model.num_sliding_layers else None

    def _draft_line(self, num_seqs: int, context: float) -> DecodeLine:
        """Drafting ``g`` tokens for ``num_seqs`` sequences, as a line in their summed context."""
        line = self.drafter.decode_line(num_seqs, 1, context, context, host=False)
        g = self.draft_passes
        # Pass j drafts at context + j tokens per sequence.
        intercept = g * line.intercept_s + line.slope_s * num_seqs * g * (g - 1) / 2
        return DecodeLine(intercept, g * line.slope_s, 0.0, line.context_limit, line.window_limit)

    def decode_line(self, num_seqs: int, context: float, context_windowed: float, padded_tokens: int = 0) -> DecodeLine:
        """Decode-only step time as a line in the summed (and windowed) context of ``num_seqs`` sequences.

        ``padded_tokens``: data-parallel ranks pad each step to the largest rank's token count.
        """
        line = self.cost.decode_line(num_seqs, self.query_per_seq, context, context_windowed, padded_tokens)
        if self.drafter is None or num_seqs == 0:
            return line
        draft = self._draft_line(num_seqs, context)
        return DecodeLine(line.intercept_s + draft.intercept_s, line.slope_s + draft.slope_s, line.slope_window_s,
                          min(line.context_limit, draft.context_limit), line.window_limit)

    def decode_s(self, num_seqs: int, context: float, context_windowed: float) -> float:
        """One decode-only step."""
        return self.step_s(StepComposition(num_seqs, context, context_windowed, 0, 0, 0.0, 0.0, 0.0, 0.0))

    def tokens(self, c: StepComposition) -> int:
        """Tokens the target computes in a step of this composition."""
        return c.num_decode_seqs * self.query_per_seq + c.prefill_tokens

    def step_s(self, c: StepComposition, padded_tokens: int = 0) -> float:
        """One step of any composition: decodes (1 + g tokens each) and prefill chunks (``padded_tokens``
        as in :meth:`decode_line`)."""
        seqs, context, context_windowed, tokens, chunks, pairs, pairs_windowed, kv, kv_windowed = c
        q = seqs * self.query_per_seq
        total = self.cost.step_s(q + tokens, q + chunks, q, seqs, context, context_windowed, pairs, pairs_windowed,
                                 kv, kv_windowed, chunks, padded_tokens)
        if self.drafter is not None and seqs:
            draft = self._draft_line(seqs, context)
            total += draft.intercept_s + draft.slope_s * context
        return total

    def _aggregates(self, columns: dict[str, np.ndarray]):
        """The target's step aggregates of recorded steps (columns of :data:`~.engine.RECORD_FIELDS`)."""
        q = columns["num_decode_seqs"] * self.query_per_seq
        return aggregates_from_arrays(
            num_tokens=q + columns["prefill_tokens"],
            num_sampled=q + columns["prefill_chunks"],
            decode_query_tokens=q,
            decode_context=columns["decode_context"],
            decode_context_windowed=columns["decode_context_windowed"],
            prefill_pairs=columns["prefill_pairs"],
            prefill_pairs_windowed=columns["prefill_pairs_windowed"],
            prefill_kv_tokens=columns["prefill_kv_tokens"],
            prefill_kv_tokens_windowed=columns["prefill_kv_tokens_windowed"],
            prefill_chunks=columns["prefill_chunks"],
            num_decode_seqs=columns["num_decode_seqs"],
        )

    def compute_bound(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """Whether compute-limited operators dominate each step (vectorized over recorded steps)."""
        return self.cost.step_time_s(self._aggregates(columns), return_compute_bound=True)[1]

    def gpu_time_s(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """GPU time of each recorded step (target and drafter), without the engine's CPU time."""
        gpu = self.cost.gpu_time_s(self._aggregates(columns))
        if self.drafter is not None:
            for i in np.flatnonzero(columns["num_decode_seqs"] > 0):
                draft = self._draft_line(int(columns["num_decode_seqs"][i]), float(columns["decode_context"][i]))
                gpu[i] += draft.intercept_s + draft.slope_s * columns["decode_context"][i]
        return gpu
