"""Engine scenes that more than one test file replays (imported by the tests, not by pagedlib)."""
from __future__ import annotations

import torch

from pagedlib import BlockManager, SamplingParams
from pagedlib.engine.batch import build_batch
from pagedlib.attention.metadata import PagedBatch
from pagedlib.engine.scheduler import SeqState


def chapter10_mixed_step() -> tuple[PagedBatch, BlockManager]:
    """Chapter 10's one mixed step, on 5 blocks of 4 tokens: X and A were prefilled and X finished;
    now A decodes one token at position 6 and B computes a chunk of 5 of its 10-token prompt."""
    manager = BlockManager(5, 4)
    manager.allocate("X", list(range(8)))              # X frees blocks 0 and 1 when it finishes
    manager.allocate("A", list(range(6)))
    manager.free("X")
    a = SeqState(seq_id="A", request_id=0, prompt=list(range(6)), params=SamplingParams(), output=[7])
    b = SeqState(seq_id="B", request_id=1, prompt=list(range(10)), params=SamplingParams())
    manager.append("A")
    manager.allocate("B", b.prompt, commit=False)
    a.num_computed_tokens, b.num_computed_tokens = 7, 5
    return build_batch([a, b], [1, 5], manager, torch.device("cpu")), manager
