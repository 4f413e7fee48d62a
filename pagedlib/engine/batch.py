"""The model runner's job: one step's scheduled tokens as one flat
:class:`~pagedlib.attention.metadata.PagedBatch`.

Every scheduled sequence brings the tokens it computes in this step, ``[num_computed_tokens - n,
num_computed_tokens)`` (the scheduler has already advanced ``num_computed_tokens``): one token for a
decode, a chunk for a prefill. They are concatenated in batch order; each token's cache slot comes
from its sequence's block table, ``slot = table[pos // block_size] * block_size + pos % block_size``,
computed for the whole batch at once. Tables shorter than the longest are padded with the block
manager's null block (block 0, which nobody owns), so a kernel that loads a whole tile of a table
reads harmless data; ``seq_lens`` masks it. A decode is a chunk of length 1, so one batch and one forward
pass hold both kinds; when every chunk has length 1 the batch says ``is_decode`` and each layer calls
its backend's ``decode``.
"""
from __future__ import annotations

from array import array
from typing import Sequence as Seq

import torch

from ..attention.metadata import PagedBatch
from ..memory.block_manager import BlockManager
from .scheduler import SeqState

__all__ = ["build_batch"]


def _longs(values: list[int]) -> torch.Tensor:
    """A CPU int64 tensor of Python ints, through an ``array`` (about 10x faster than ``torch.tensor``
    on a list, which matters at hundreds of sequences per step)."""
    return torch.frombuffer(array("q", values), dtype=torch.long) if values else torch.zeros(0, dtype=torch.long)


def build_batch(seqs: Seq[SeqState], num_new_tokens: Seq[int], block_manager: BlockManager,
                device: torch.device) -> PagedBatch:
    """The flat batch of ``seqs``, sequence ``i`` bringing its last ``num_new_tokens[i]`` computed tokens."""
    bs, num_seqs = block_manager.block_size, len(seqs)
    null = block_manager.null_block if block_manager.null_block is not None else 0
    tables = [block_manager.block_table(seq.seq_id) for seq in seqs]
    width = max(len(t) for t in tables)
    flat_tables, lens = [], []
    for seq, table in zip(seqs, tables):
        flat_tables += table
        flat_tables += [null] * (width - len(table))          # padding names the null block (masked by seq_lens)
        lens.append(seq.num_computed_tokens)
    block_tables = _longs(flat_tables).view(num_seqs, width)  # [num_seqs, max_blocks]
    longest = max(num_new_tokens)                             # known here: no GPU sync later
    if longest == 1:                                          # decode: one token each, its slot in Python
        ids = [seq[n - 1] for seq, n in zip(seqs, lens)]   # a decode's, or a one-token chunk's
        positions = [n - 1 for n in lens]
        slots = [table[p // bs] * bs + p % bs for table, p in zip(tables, positions)]
        host = _longs(ids + positions + slots + lens + list(range(num_seqs + 1)))
        ids_t, positions, slots, seq_lens, starts = host.to(device).split(
            [num_seqs, num_seqs, num_seqs, num_seqs, num_seqs + 1])                 # one copy to the device
    else:
        ids = []
        for seq, n in zip(seqs, num_new_tokens):
            ids += seq[seq.num_computed_tokens - n:seq.num_computed_tokens]
        new = _longs(list(num_new_tokens))                    # [num_seqs]
        seq_lens = _longs(lens)                               # [num_seqs], tokens in the cache after this step
        starts = torch.zeros(num_seqs + 1, dtype=torch.long)
        torch.cumsum(new, 0, out=starts[1:])                  # [num_seqs + 1]
        owner = torch.repeat_interleave(torch.arange(num_seqs), new)                   # [num_tokens] its sequence
        positions = torch.arange(len(ids)) - starts[owner] + (seq_lens - new)[owner]   # [num_tokens]
        slots = block_tables[owner, positions // bs] * bs + positions % bs            # [num_tokens]
        ids_t, positions, slots, seq_lens, starts = torch.cat(
            [_longs(ids), positions, slots, seq_lens, starts]).to(device).split(
            [len(ids), len(ids), len(ids), num_seqs, num_seqs + 1])               # one copy to the device
    return PagedBatch(
        input_ids=ids_t,                                                           # [num_tokens] int64
        positions=positions,                                                       # [num_tokens] int64
        slot_mapping=slots,                                                        # [num_tokens] int64
        block_tables=block_tables.to(device=device, dtype=torch.int32),            # [num_seqs, max_blocks]
        seq_lens=seq_lens.int(),                                                   # [num_seqs]
        query_start_loc=starts.int(),                                              # [num_seqs + 1]
        is_decode=longest == 1, max_query_len=longest, trusted=True)
