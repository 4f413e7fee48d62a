"""Workloads: the prompt and output lengths of a stream of requests.

``Workload.sharegpt(n, seed)`` and ``Workload.alpaca(n, seed)`` draw lengths from the histograms of
the PagedAttention paper's Figure 11 (``pagedlib/data/*_lengths.csv``; see its README for the source
and how the bars were read), through :func:`pagedlib.memory.real_lengths.draw_requests`. A length is
drawn by picking a bar with probability equal to its area, then a point uniformly inside the bar,
rounded to a whole token. Input and output are drawn
independently: the histograms are marginals, so any correlation between them in the real data sets is
lost. The paper's benchmark dropped requests with ``prompt + output > max_len``, so in its data a long
prompt comes with a short output; to keep that (and the prompt histogram), a too-long output is drawn
again for the same prompt. The means land within 1.5% of the paper's (ShareGPT: prompt 161.4,
output 334.1 vs 161.31 and 337.99 in the paper; Alpaca never exceeds 2048).
"""
from __future__ import annotations

import numpy as np

# the one loader of the shipped length histograms (Part I uses it too); kept importable from here
from ..memory.real_lengths import (DATA_DIR, DATASETS, draw_requests, histogram,  # noqa: F401
                                   sample_lengths, shortest_length)


class Workload:
    """The requests of one experiment: ``prompt_lens[i]`` and ``output_lens[i]`` tokens of request i.

    Build one from your own lengths, ``Workload([512, 37], [100, 4])``, or draw one from the paper's
    data sets with :meth:`sharegpt` / :meth:`alpaca`. Both arrays are int64 numpy arrays.
    """

    def __init__(self, prompt_lens, output_lens, name: str = "custom"):
        prompt = np.asarray(prompt_lens, dtype=np.int64).reshape(-1)        # [num_requests]
        output = np.asarray(output_lens, dtype=np.int64).reshape(-1)        # [num_requests]
        if prompt.shape != output.shape:
            raise ValueError(f"prompt_lens and output_lens must have the same length; got "
                             f"{prompt.size} and {output.size}")
        if prompt.size and (prompt.min() < 1 or output.min() < 1):
            raise ValueError("every prompt and output length must be >= 1 token; got min prompt "
                             f"{prompt.min()}, min output {output.min()}")
        self.prompt_lens, self.output_lens, self.name = prompt, output, name

    @classmethod
    def sharegpt(cls, num_requests: int, seed: int = 0, max_len: int = 2048) -> "Workload":
        """``num_requests`` requests with ShareGPT's lengths (long chats: mean in 161, out 338)."""
        return cls.from_dataset("sharegpt", num_requests, seed, max_len)

    @classmethod
    def alpaca(cls, num_requests: int, seed: int = 0, max_len: int = 2048) -> "Workload":
        """``num_requests`` requests with Alpaca's lengths (short instructions: mean in 19, out 58)."""
        return cls.from_dataset("alpaca", num_requests, seed, max_len)

    @classmethod
    def from_dataset(cls, dataset: str, num_requests: int, seed: int = 0,
                     max_len: int = 2048) -> "Workload":
        """Draw ``num_requests`` (prompt, output) pairs with ``prompt + output <= max_len``."""
        if num_requests < 0:
            raise ValueError(f"num_requests must be >= 0; got {num_requests}")
        prompt, output = draw_requests(dataset, num_requests, seed, max_len)
        return cls(prompt, output, name=dataset)

    def __len__(self) -> int:
        return int(self.prompt_lens.size)

    @property
    def total_lens(self) -> np.ndarray:
        """prompt + output of every request: the K/V slots it needs at its end."""
        return self.prompt_lens + self.output_lens

    def arrival_times(self, request_rate: float | None, seed: int = 0) -> np.ndarray:
        """Arrival time (s) of every request: all at 0 if ``request_rate`` is None, else Poisson."""
        if request_rate is None:
            return np.zeros(len(self))
        if request_rate <= 0:
            raise ValueError(f"request_rate must be > 0 requests/s or None; got {request_rate}")
        gaps = np.random.default_rng(seed).exponential(1.0 / request_rate, size=len(self))
        return np.cumsum(gaps)                                               # [num_requests]

    def __repr__(self) -> str:
        if not len(self):
            return f"Workload({self.name}, 0 requests)"
        return (f"Workload({self.name}, {len(self)} requests, mean prompt "
                f"{self.prompt_lens.mean():.1f}, mean output {self.output_lens.mean():.1f})")
