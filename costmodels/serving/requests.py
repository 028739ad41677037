"""Requests, the simulator's entities: drawn from a traffic spec, then tracked as per-request columns.

:func:`draw_requests` turns a :class:`~servopt.costmodels.serving.traffic.Traffic` into token counts
and (for open-loop and trace arrivals) arrival times. :class:`RequestTable` holds every request's
progress as plain Python lists, because the event loop reads and writes one request at a time and
list indexing is several times cheaper than numpy scalar access.

Example:
    >>> import numpy as np
    >>> from servopt.costmodels.serving.traffic import Traffic
    >>> traffic = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 4},
    ...     "input_tokens": {"kind": "fixed", "value": 1000}, "output_tokens": {"kind": "fixed", "value": 50},
    ...     "shared_prefix_fraction": 0.5})
    >>> drawn = draw_requests(traffic, 3, np.random.default_rng(0), max_model_len=4096, block_size=16,
    ...                       prefix_caching=True)
    >>> drawn.input_tokens.tolist(), drawn.cached_tokens.tolist()
    ([1000, 1000, 1000], [496, 496, 496])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from .traffic import Traffic

# Request states.
WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


@dataclass(frozen=True)
class DrawnRequests:
    """Token counts of every request and, unless clients are closed-loop, their arrival times.

    ``cached_tokens`` of a prompt are a prefix-cache hit; ``shared_prefix`` says whether those
    prefixes are one prefix every request shares (a system prompt: its blocks are held once), or each
    request's own (a prompt sent before: its blocks are its own).

    ``classes`` is each request's tenant class (an index into ``traffic.classes``) and ``priority``
    its vLLM priority, when the traffic has classes. Multi-turn sessions give each request its
    ``session`` and the next turn's request (``follow_up``, -1 for a session's last), sent
    ``think_s`` (that next request's own entry) after it finishes; a follow-up's arrival time is NaN
    until then, and its prefix-cache hit is found when it is scheduled (:mod:`.prefix_cache`).
    """

    arrival_s: np.ndarray | None
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    clipped: int
    shared_prefix: bool = True
    classes: np.ndarray | None = None
    priority: np.ndarray | None = None
    session: np.ndarray | None = None
    follow_up: np.ndarray | None = None
    think_s: np.ndarray | None = None
    num_classes: int = 1

    def __len__(self) -> int:
        return len(self.input_tokens)


@dataclass(frozen=True)
class _Sessions:
    """Conversations drawn whole, turn after turn (see :func:`_draw_sessions`)."""

    starts_s: np.ndarray  # per request: its session's start for a first turn, NaN for the others
    inputs: np.ndarray
    outputs: np.ndarray
    classes: np.ndarray
    session: np.ndarray
    follow_up: np.ndarray
    think_s: np.ndarray
    ended_early: int  # sessions that stopped before their drawn turns, at the context limit


def _draw_sessions(traffic: Traffic, n: int, rng: np.random.Generator, limit: int) -> _Sessions:
    """``n`` requests of whole conversations: each turn's prompt is the previous prompt and answer
    plus its new message; a session ends when its next turn (prompt and answer) would pass ``limit``."""
    from .traffic import sample_lengths  # see draw_requests
    arrival = traffic.arrival
    lengths, shares = traffic.class_lengths(), traffic.class_shares
    cols: dict[str, list] = {k: [] for k in ("start", "input", "output", "class", "session", "think")}
    ended = 0
    session, clock = 0, 0.0
    while len(cols["input"]) < n:
        clock += float(rng.exponential(1.0 / arrival.rate_per_s))
        k = int(rng.choice(len(shares), p=shares)) if len(shares) > 1 else 0
        turns = int(arrival.turns.sample(rng, 1)[0])
        new, out = sample_lengths(*lengths[k], rng, turns)
        think = arrival.think_time.sample(rng, turns)
        prompt = 0
        for j in range(min(turns, n - len(cols["input"]))):
            prompt = int(new[j]) if j == 0 else prompt + int(out[j - 1]) + int(new[j])
            if j and prompt + int(out[j]) > limit:
                ended += 1
                break
            cols["start"].append(clock if j == 0 else math.nan)
            cols["input"].append(prompt)
            cols["output"].append(int(out[j]))
            cols["class"].append(k)
            cols["session"].append(session)
            cols["think"].append(0.0 if j == 0 else float(think[j]))
        session += 1
    sessions = np.asarray(cols["session"], dtype=np.int64)
    follow = np.arange(1, len(sessions) + 1, dtype=np.int64)
    follow[np.append(sessions[1:] != sessions[:-1], True)] = -1
    return _Sessions(np.asarray(cols["start"]), np.asarray(cols["input"], dtype=np.int64),
                     np.asarray(cols["output"], dtype=np.int64), np.asarray(cols["class"], dtype=np.int64),
                     sessions, follow, np.asarray(cols["think"]), ended)


def session_history(prompt: np.ndarray, output: np.ndarray, follow_up: np.ndarray, block_size: int) -> np.ndarray:
    """Per request, the tokens of its prompt that the previous turn of its conversation computed, in
    whole blocks (the prefix cache's most; the last prompt token is always computed): 0 for first turns."""
    prompt, output, follow_up = (np.asarray(x, dtype=np.int64) for x in (prompt, output, follow_up))
    history = np.zeros(len(prompt), dtype=np.int64)
    before = np.flatnonzero(follow_up >= 0)
    after = follow_up[before]
    history[after] = np.minimum((prompt[before] + output[before] - 1) // block_size,
                                (prompt[after] - 1) // block_size) * block_size
    return history


def _draw_lengths(traffic: Traffic, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Prompt and output lengths of ``n`` generated requests, and their classes (None without)."""
    from .traffic import sample_lengths  # see draw_requests
    if traffic.classes is None:
        return *sample_lengths(traffic.input_tokens, traffic.output_tokens, rng, n), None
    classes = rng.choice(len(traffic.classes), size=n, p=traffic.class_shares)
    inputs, outputs = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for k, (input_dist, output_dist) in enumerate(traffic.class_lengths()):
        pick = classes == k
        inputs[pick], outputs[pick] = sample_lengths(input_dist, output_dist, rng, int(pick.sum()))
    return inputs, outputs, classes


def draw_requests(traffic: Traffic, num_requests: int | None, rng: np.random.Generator, *, max_model_len: int,
                  block_size: int, prefix_caching: bool, arrival_share: float = 1.0,
                  context_source: str = "the deployment's max_model_len") -> DrawnRequests:
    """Draw ``num_requests`` requests (a trace defaults to its length) and clip them to the context.

    ``arrival_share`` < 1 keeps that share of a generated open-loop stream, evenly spaced in arrival
    order (every k-th arrival for a share of 1/k): the arrivals that a round-robin router sends to
    some of the replicas it balances (see :func:`~servopt.costmodels.serving.simulator.simulate_compiled`).

    Prompt plus output is clipped to ``min(traffic.max_context, max_model_len)`` as a benchmark
    client would; when most requests would be clipped without ``traffic.max_context`` asking for it,
    the traffic is refused (:func:`~servopt.costmodels.serving.traffic.check_context`; ``context_source``
    says where ``max_model_len`` comes from). A shared prefix, or a trace's own ``cached_tokens``, is a
    prefix-cache hit of whole blocks, at most the prompt minus one token (vLLM always computes the last
    prompt token); so is a prompt the server saw before (``traffic.prompt_cache``). Sessions end at the context limit instead (:class:`~servopt.costmodels.serving.traffic.SessionArrival`).
    """
    # Imported here: the scheduler reads this module's request states without the traffic models.
    from .traffic import check_context
    arrival: np.ndarray | None = None
    trace_cached: np.ndarray | None = None
    classes = sessions = None
    limit = min(traffic.max_context or max_model_len, max_model_len)
    if limit < 2:
        raise InputError(f"the context limit ({limit} tokens) leaves no room for a prompt and an output token")
    if traffic.arrival.kind == "trace":
        trace = traffic.read_trace()
        n = len(trace) if num_requests is None else num_requests
        if n > len(trace):
            raise InputError(
                f"trace '{traffic.arrival.path or 'records'}' holds {len(trace)} requests; ask for at most that many (got {n})"
            )
        arrival = trace.arrival_s[:n]
        inputs = trace.input_tokens[:n] if trace.input_tokens is not None else traffic.input_tokens.sample(rng, n)
        outputs = trace.output_tokens[:n] if trace.output_tokens is not None else traffic.output_tokens.sample(rng, n)
        trace_cached = trace.cached_tokens[:n] if trace.cached_tokens is not None else None
    else:
        if num_requests is None:
            raise InputError("num_requests is required for generated traffic")
        n = num_requests
        if traffic.arrival.kind == "sessions":
            sessions = _draw_sessions(traffic, n, rng, limit)
            arrival, inputs, outputs = sessions.starts_s, sessions.inputs, sessions.outputs
            classes = sessions.classes if traffic.classes is not None else None
        else:
            if traffic.arrival.kind != "closed_loop":
                stride = 1.0 / arrival_share
                every = traffic.arrival.arrival_times_s(rng, math.ceil(n * stride))
                arrival = every[np.floor(np.arange(n) * stride).astype(np.int64)]
            inputs, outputs, classes = _draw_lengths(traffic, n, rng)
    raw_inputs, raw_outputs = np.asarray(inputs, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
    consented = traffic.max_context is not None and traffic.max_context <= max_model_len
    check_context(raw_inputs, raw_outputs, limit, consented,
                  "traffic.max_context" if traffic.max_context == limit else context_source)
    inputs = np.minimum(raw_inputs, limit - 1)
    outputs = np.minimum(raw_outputs, limit - inputs)
    clipped = int(np.count_nonzero((inputs < raw_inputs) | (outputs < raw_outputs)))
    cached = np.zeros_like(inputs)
    seen = traffic.prompt_cache
    if seen is not None and seen.kind == "repeated" and sessions is None:
        # A finite prompt set: request i resends prompt i mod N, with its length.
        first = np.arange(n) % seen.distinct_prompts
        inputs, outputs = inputs[first], outputs[first]
    if prefix_caching and seen is not None:
        again = np.ones(n, dtype=bool) if seen.kind == "warm" or seen.seen_before else \
            np.arange(n) >= seen.distinct_prompts
        cached = np.where(again, inputs, 0)
    elif prefix_caching and trace_cached is not None:
        cached = np.minimum(np.asarray(trace_cached, dtype=np.int64), inputs)
    elif prefix_caching and traffic.shared_prefix_fraction > 0:
        cached = np.floor(traffic.shared_prefix_fraction * inputs)
    cached = np.minimum(cached // block_size * block_size, (inputs - 1) // block_size * block_size).astype(np.int64)
    priority = None
    if classes is not None:
        priority = np.asarray([c.priority for c in traffic.classes], dtype=np.int64)[classes]
    extra = {}
    if sessions is not None:
        extra = {"session": sessions.session, "follow_up": sessions.follow_up, "think_s": sessions.think_s}
    return DrawnRequests(arrival, inputs, outputs, cached, clipped,
                         shared_prefix=trace_cached is None and sessions is None and seen is None,
                         classes=classes, priority=priority, num_classes=len(traffic.class_shares), **extra)


class RequestTable:
    """Progress of every request, one list per field, indexed by request id.

    A request has ``prompt + generated`` tokens; ``computed`` of them have KV in cache. Each step
    schedules the difference (one token for a plain decode); when computed catches up, a token is
    sampled. Decoding requests keep their context implicitly as ``base_context + growth x (tick -
    base_tick)`` of their engine, so that advancing a fixed batch by many steps touches no request.
    """

    def __init__(self, drawn: DrawnRequests):
        n = len(drawn)
        nan = math.nan
        self.size = n
        self.prompt: list[int] = drawn.input_tokens.tolist()
        self.output: list[int] = drawn.output_tokens.tolist()
        self.cached: list[int] = drawn.cached_tokens.tolist()
        self.cached_shared: list[bool] = [drawn.shared_prefix] * n
        self.arrival_s: list[float] = drawn.arrival_s.tolist() if drawn.arrival_s is not None else [nan] * n
        self.num_classes = drawn.num_classes
        self.klass: list[int] = drawn.classes.tolist() if drawn.classes is not None else [0] * n
        self.priority: list[int] = drawn.priority.tolist() if drawn.priority is not None else [0] * n
        self.sessions = drawn.session is not None
        self.session: list[int] = drawn.session.tolist() if self.sessions else [-1] * n
        self.follow_up: list[int] = drawn.follow_up.tolist() if self.sessions else [-1] * n
        self.think_s: list[float] = drawn.think_s.tolist() if self.sessions else [0.0] * n
        self.state = [WAITING] * n
        self.generated = [0] * n
        self.computed = [0] * n
        self.base_context = [0.0] * n
        self.base_tick = [0] * n
        self.finish_tick = [0] * n
        self.scheduled_s = [nan] * n
        self.first_token_s = [nan] * n
        self.finish_s = [nan] * n
        self.last_emit_s = [nan] * n
        self.kv_ready_s = [nan] * n
        self.preemptions = [0] * n
        self.instance = [-1] * n
        self.prefill_instance = [-1] * n
        # Cumulative tokens after each verify step (speculative decoding only).
        self.emitted: dict[int, np.ndarray] = {}

    _EMPTY: pd.DataFrame | None = None

    @classmethod
    def empty_frame(cls) -> pd.DataFrame:
        """The per-request columns with no rows (an analytic estimate has no requests)."""
        if cls._EMPTY is None:
            cls._EMPTY = RequestTable(DrawnRequests(np.zeros(0), *(np.zeros(0, dtype=np.int64),) * 3, 0)).frame()
        return cls._EMPTY.copy()

    def frame(self) -> pd.DataFrame:
        """One row per request (times in seconds)."""
        import pandas as pd  # on first use: pandas costs half a second of start-up

        frame = pd.DataFrame({
            "arrival_s": self.arrival_s,
            "scheduled_s": self.scheduled_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "input_tokens": self.prompt,
            "output_tokens": self.output,
            "cached_tokens": self.cached,
            "preemptions": self.preemptions,
            "instance": self.instance,
        })
        if any(i >= 0 for i in self.prefill_instance):
            frame["prefill_instance"] = self.prefill_instance
            frame["kv_ready_s"] = self.kv_ready_s
        if self.num_classes > 1:
            frame["class"] = self.klass
        if self.sessions:
            frame["session"] = self.session
        return frame
