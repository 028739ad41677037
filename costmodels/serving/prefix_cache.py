"""vLLM's prefix cache at the level of conversations: which earlier turn's blocks are still there.

What vLLM V1 does (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``,
``single_type_kv_cache_manager.py``): every full block of a request's tokens is hashed (the hash
chains the previous block's, so a block matches only with its whole prefix); a freed block keeps
its hash and content and joins the tail of the free block queue, the tail blocks of a request
first ("free blocks in reverse order so that the tail blocks are evicted first"); a new block is
taken from the head of that queue, evicting whatever it cached (least recently freed first); a
new request's prompt is looked up block by block and the blocks it hits leave the queue again
(``touch``); the last prompt token is always computed (the hit is at most the prompt minus one
token, whole blocks).

What :class:`PrefixCache` keeps of that, per engine: the free block queue as segments of blocks in
free order, each either cached content of one conversation (the blocks of a turn's prompt and
answer, or of a preempted request's computed tokens) or content no later request reuses. Blocks
taken since the last event come from the head, so before each event (a request freeing its blocks,
a turn looking up its history) the queue is cut back to the engine's free blocks
(:meth:`PrefixCache.sync`); a trimmed conversation keeps the prefix of its blocks, as vLLM's
reverse freeing does. A turn then hits its conversation's cached prefix on the engine that serves
it (a turn routed to another replica finds nothing, as with vLLM's routers, which do not follow
sessions).

Approximated: block hashes are not computed: a conversation's blocks match its next turn (whose
prompt begins with them) and nothing else; blocks hit from the middle of the queue leave it
without moving the blocks behind them forward until the next cut (the cut is exact in count, so
this only shifts which blocks are evicted first by the hits' size); and pipeline lanes, each with
its share of the blocks, keep caches of their own.

Example:
    >>> from servopt.costmodels.serving.scheduler import BlockCounter
    >>> cache = PrefixCache(100, BlockCounter([-(-c // 16) for c in range(4000)]))
    >>> cache.sync(90)                     # a running turn took 10 blocks
    >>> cache.release(7, 10, 150)          # it finished: 9 full blocks (144 tokens) stay cached
    >>> cache.peek(7, 400)
    144
    >>> cache.sync(5)                      # other requests took 95 blocks from the head: the 90
    >>> cache.peek(7, 400)                 # free before it, its partial block and 4 of its tail
    80
    >>> cache.take(7, 400), cache.peek(7, 400)
    (80, 0)
"""

from __future__ import annotations

from collections import deque

import numpy as np

NO_OWNER = -1


def retained_history(history: np.ndarray, gap_s: np.ndarray, retention_s: float) -> np.ndarray:
    """The analytic estimate's view: a turn hits its whole history when its previous turn's blocks
    were freed less than ``retention_s`` before it (``gap_s``: its think time), else nothing. In a
    steady state the free block queue turns over once every ``retention_s`` = free blocks / blocks
    freed per second (the characteristic time of an LRU cache), and a conversation's blocks, freed
    together, are evicted within a short spread of that age."""
    return np.where(np.asarray(gap_s) < retention_s, history, 0).astype(float)


class PrefixCache:
    """The free block queue of one engine, as segments ``[conversation or -1, blocks, tokens]``."""

    def __init__(self, num_blocks: int, blocks):
        self.blocks = blocks  # BlockCounter: blocks a context of t tokens holds
        self.queue: deque[list] = deque([[NO_OWNER, num_blocks, 0]])
        self.queued = num_blocks
        self.segment: dict[int, list] = {}

    def _tokens_of(self, blocks: int) -> int:
        """Tokens of whole blocks that ``blocks`` blocks (over every KV group) hold."""
        return int(blocks // self.blocks.groups) * self.blocks.block_size

    def _drop(self, seg: list) -> None:
        if seg[0] != NO_OWNER and self.segment.get(seg[0]) is seg:
            del self.segment[seg[0]]

    def sync(self, free_blocks: int) -> None:
        """Blocks taken since the last event came from the head: cut the queue to ``free_blocks``."""
        excess = self.queued - free_blocks
        while self.queue and (excess > 0 or not self.queue[0][1]):
            seg = self.queue[0]
            if seg[1] > excess:
                seg[1] -= max(excess, 0)
                self.queued -= max(excess, 0)
                seg[2] = min(seg[2], self._tokens_of(seg[1]))
                break
            excess -= seg[1]
            self.queued -= seg[1]
            self.queue.popleft()
            self._drop(seg)

    def peek(self, conversation: int, most_tokens: int) -> int:
        """Tokens a request of ``conversation`` would hit now (at most ``most_tokens``, whole blocks)."""
        seg = self.segment.get(conversation)
        if seg is None:
            return 0
        return min(seg[2], max(most_tokens, 0) // self.blocks.block_size * self.blocks.block_size)

    def take(self, conversation: int, most_tokens: int) -> int:
        """A request of ``conversation`` is scheduled: the blocks it hits leave the queue. Returns
        the tokens hit; the conversation's other cached blocks stay in the queue, reused by no one."""
        tokens = self.peek(conversation, most_tokens)
        seg = self.segment.pop(conversation, None)
        if seg is None:
            return 0
        used = min(self.blocks.table[tokens], seg[1])
        seg[0], seg[1], seg[2] = NO_OWNER, seg[1] - used, 0
        self.queued -= used
        return tokens

    def release(self, conversation: int, held_blocks: int, content_tokens: int) -> None:
        """A request frees ``held_blocks`` whose first ``content_tokens`` tokens are computed; its
        whole blocks stay cached for ``conversation`` (-1: for no one). The last, partial block is
        freed first, nearer the head."""
        held_blocks = max(int(held_blocks), 0)
        cached_tokens = content_tokens // self.blocks.block_size * self.blocks.block_size if conversation >= 0 else 0
        cached = min(self.blocks.table[cached_tokens], held_blocks)
        if held_blocks > cached:
            self.queue.append([NO_OWNER, held_blocks - cached, 0])
        if cached:
            old = self.segment.get(conversation)
            if old is not None:
                old[0], old[2] = NO_OWNER, 0
            seg = [conversation, cached, cached_tokens]
            self.queue.append(seg)
            self.segment[conversation] = seg
        self.queued += held_blocks
