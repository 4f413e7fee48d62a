"""Routing by prefix across replicas (chapter 13): N engines on the simulated clock behind a router.

Each :class:`Replica` is the engine's own :class:`~pagedlib.engine.scheduler.Scheduler` over its own
:class:`~pagedlib.memory.block_manager.BlockManager` with prefix caching on, as in
:mod:`pagedlib.sim.counting_engine`, but the requests carry real token ids, so a prompt that starts
like one served before on the same replica finds its blocks cached and skips their prefill. No
model runs: a request "samples" the reply tokens its workload wrote for it, so the next turn of a
chat (system prompt + history + reply + new message) can hit the blocks of the last one.

The router sees every request when it arrives and picks a replica (:data:`POLICIES`):

- ``"round_robin"``: the next replica in turn, whatever it holds;
- ``"least_loaded"``: the replica with the fewest unfinished requests (waiting + running);
- ``"prefix_aware"``: the replica whose prefix cache holds the longest prefix of the prompt,
  balanced against load: score = cached tokens - ``load_cost`` x unfinished requests (each request
  ahead in line is worth ``load_cost`` tokens of prefill); ties go to the least loaded.

The prefix-aware router here asks each replica's block manager how many leading tokens it would
hit now (:meth:`~pagedlib.memory.block_manager.BlockManager.num_cached_tokens`): an exact view.
Production routers keep an approximate one (SGLang's router: a radix tree of what it sent where).

:class:`Cluster` runs the replicas and the router on one event clock. A replica's step starts when
the replica is free and ends ``step_time(kv read, prefill tokens)`` later; the next turn of a chat
arrives ``think_s`` after the last token of the previous turn, so a slow policy also delays later
turns (a closed loop, as a person waits for the answer before typing the next message).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..engine.request_checks import check_request
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler, SeqState
from ..memory.block_manager import BlockManager
from ..validation import positive_int
from .tiers import CpuTier
from .timing import OPT13B_A100, StepTime

__all__ = ["ChatWorkload", "Turn", "Replica", "Cluster", "RouterResult", "POLICIES", "LOAD_COST", "route",
           "serve_chats"]

POLICIES = ("round_robin", "least_loaded", "prefix_aware")
VOCAB = 32_000          # token ids are drawn in [1, VOCAB): only their equality matters
LOAD_COST = 256         # tokens of prefill one unfinished request is worth to "prefix_aware"


@dataclass(frozen=True)
class Turn:
    """One turn of a chat: the user's new message and the assistant's reply, as token ids."""

    message: tuple[int, ...]
    reply: tuple[int, ...]


@dataclass
class ChatWorkload:
    """``num_users`` chats of ``turns`` turns each. User ``u`` has the system prompt
    ``system[u % num_system_prompts]`` (``system_len`` tokens; users sharing an application share
    it); turn ``t``'s prompt is the system prompt, then every earlier message and reply, then its
    own message. Chats start as a Poisson process of ``chat_rate`` per second; each later turn
    arrives ``think_s`` after the previous reply's last token."""

    system: list[tuple[int, ...]]
    chats: list[list[Turn]]
    start_s: np.ndarray
    think_s: float

    @classmethod
    def generate(cls, num_users: int = 64, turns: int = 4, *, num_system_prompts: int = 8,
                 system_len: int = 1024, message_len: tuple[int, int] = (16, 96),
                 reply_len: tuple[int, int] = (32, 192), chat_rate: float = 2.0, think_s: float = 2.0,
                 seed: int = 0) -> "ChatWorkload":
        """Draw a workload: message and reply lengths uniform in the given ``(low, high)`` ranges."""
        for name, value in (("num_users", num_users), ("turns", turns),
                            ("num_system_prompts", num_system_prompts), ("system_len", system_len)):
            positive_int(name, value, "")
        if chat_rate <= 0 or think_s < 0:
            raise ValueError(f"chat_rate must be > 0 chats/s and think_s >= 0 s; got {chat_rate}, {think_s}")
        rng = np.random.default_rng(seed)

        def tokens(n: int) -> tuple[int, ...]:
            return tuple(int(t) for t in rng.integers(1, VOCAB, size=n))

        system = [tokens(system_len) for _ in range(num_system_prompts)]
        chats = [[Turn(tokens(int(rng.integers(*message_len, endpoint=True))),
                       tokens(int(rng.integers(*reply_len, endpoint=True)))) for _ in range(turns)]
                 for _ in range(num_users)]
        start = np.cumsum(rng.exponential(1.0 / chat_rate, size=num_users))
        return cls(system, chats, start, float(think_s))

    def prompt(self, user: int, turn: int) -> list[int]:
        """The prompt of ``user``'s turn ``turn``: system prompt, the history, the new message."""
        out = list(self.system[user % len(self.system)])
        for t in self.chats[user][:turn]:
            out += t.message
            out += t.reply
        out += self.chats[user][turn].message
        return out

    @property
    def num_requests(self) -> int:
        return sum(map(len, self.chats))


@dataclass(eq=False)
class _Request:
    rid: int
    user: int
    turn: int
    arrival_s: float
    seq: SeqState
    reply: tuple[int, ...]
    replica: int = -1
    first_token_s: float = -1.0
    finish_s: float = -1.0
    hit_tokens: int = -1             # tokens found cached at its first admission
    tier_tokens: int = 0             # tokens copied back from the CPU tier then


class Replica:
    """One engine: the scheduler and block manager of ``pagedlib.LLM`` with prefix caching, no model.

    ``clock`` is when it is free to start its next step."""

    def __init__(self, index: int, kv_slots: int, block_size: int, step_time: StepTime,
                 max_len: int, cpu_blocks: int = 0, copy_s_per_token: float = 0.0):
        self.index, self.step_time, self.max_len = index, step_time, max_len
        self.block_manager = BlockManager(kv_slots // block_size, block_size, enable_prefix_caching=True)
        # a second tier (chapter 13): evicted blocks go to CPU memory and are copied back on a hit
        self.cpu_tier = CpuTier(cpu_blocks).attach(self.block_manager) if cpu_blocks else None
        self.copy_s_per_token = copy_s_per_token
        self.loaded_tokens = 0                       # tokens copied back from the CPU tier
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=1 << 30)
        self.clock = 0.0
        self.busy_s = 0.0
        self.steps = 0
        self.prefill_tokens = 0
        self._requests: dict[int, _Request] = {}

    @property
    def load(self) -> int:
        """Unfinished requests (waiting and running)."""
        return len(self.scheduler.waiting) + len(self.scheduler.running)

    def add(self, req: _Request, now: float) -> None:
        bm = self.block_manager
        try:
            check_request(req.rid, req.seq.prompt, req.seq.params, vocab_size=VOCAB,
                          context_length=self.max_len, block_size=bm.block_size,
                          num_usable_blocks=bm.num_usable_blocks, max_num_seqs=self.scheduler.max_num_seqs)
        except ValueError as exc:
            raise ValueError(f"{exc} In the router simulator: raise kv_slots or max_len, or make the "
                             "chats shorter.") from None
        if not self.scheduler.has_unfinished():
            self.clock = max(self.clock, now)         # idle until now
        req.replica = self.index
        self._requests[req.seq.seq_id] = req
        self.scheduler.add(req.seq)

    def step(self) -> list[_Request]:
        """One step from ``clock``; return the requests it finished (their last token at the end)."""
        scheduled = self.scheduler.schedule()
        if not scheduled.seqs:
            raise RuntimeError("the scheduler ran nobody although requests wait; every request was "
                               "checked to fit an empty pool, so this is a bug")
        loaded = 0
        for seq in scheduled.admitted:
            req = self._requests[seq.seq_id]
            tier = self._load_from_tier(seq) if self.cpu_tier is not None else 0
            loaded += tier
            if req.hit_tokens < 0:
                req.hit_tokens, req.tier_tokens = seq.num_cached_tokens, tier
        kv_read = sum(s.num_computed_tokens for s in scheduled.seqs)
        prefill = sum(scheduled.prefill_chunks) - loaded
        # copies back are counted as if they ran before the step (a real engine overlaps them)
        seconds = self.step_time(kv_read, prefill) + loaded * self.copy_s_per_token
        self.loaded_tokens += loaded
        self.clock += seconds
        self.busy_s += seconds
        self.prefill_tokens += prefill
        self.steps += 1
        finished = []
        for seq in scheduled.seqs:
            if seq.all_computed:                    # it samples: the next token of its reply
                req = self._requests[seq.seq_id]
                seq.output.append(req.reply[len(seq.output)])
                if req.first_token_s < 0:
                    req.first_token_s = self.clock
                if len(seq.output) >= seq.max_new_tokens:
                    self.scheduler.finish(seq)
                    req.finish_s = self.clock
                    finished.append(self._requests.pop(seq.seq_id))
        return finished

    def _load_from_tier(self, seq: SeqState) -> int:
        """Tokens of a just-admitted sequence's first chunk that the CPU tier holds past its GPU hit
        (whole blocks in a row): they are copied back, not prefilled (the scheduler counts them as
        computed in this step, and they enter the GPU's prefix cache as any computed block)."""
        bs = self.block_manager.block_size
        tokens = seq.tokens
        names = self.block_manager.block_names(tokens[:seq.num_computed_tokens], seq.cache_salt)
        # leave the last token to be computed (its logits are needed), as the prefix cache does
        last = min(len(names), (len(tokens) - 1) // bs)
        return bs * self.cpu_tier.match(names, tokens, seq.num_cached_tokens // bs, last, bs)


Policy = Callable[["_Request", Sequence[Replica], int], int]


def route(policy: str, prompt: Sequence[int], replicas: Sequence[Replica], count: int,
          load_cost: int = LOAD_COST) -> int:
    """The replica ``policy`` sends ``prompt`` to (the ``count``-th request routed so far)."""
    if policy == "round_robin":
        return count % len(replicas)
    if policy == "least_loaded":
        return min(range(len(replicas)), key=lambda i: (replicas[i].load, i))
    if policy == "prefix_aware":
        def score(i: int) -> tuple:
            r = replicas[i]
            return (r.block_manager.num_cached_tokens(prompt) - load_cost * r.load, -r.load, -i)
        return max(range(len(replicas)), key=score)
    raise ValueError(f"policy must be one of {POLICIES} or a function; got {policy!r}")


@dataclass
class RouterResult:
    """What one :func:`serve_chats` run measured, in modelled seconds."""

    policy: str
    num_replicas: int
    ttft_s: np.ndarray                 # per request
    prompt_tokens: np.ndarray          # per request
    hit_tokens: np.ndarray             # per request: found cached on the GPU at its first admission
    tier_tokens: np.ndarray            # per request: copied back from the CPU tier then
    replica: np.ndarray                # per request: where it went
    generated: int
    makespan_s: float
    prefill_tokens: int                # prompt tokens actually computed (recomputes included)
    loaded_tokens: int = 0             # tokens copied back from CPU tiers (resumes included)
    busy_s: list[float] = field(default_factory=list)   # per replica

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens found in a GPU prefix cache."""
        return float(self.hit_tokens.sum() / self.prompt_tokens.sum())

    @property
    def tier_hit_rate(self) -> float:
        """Share of prompt tokens copied back from a CPU tier."""
        return float(self.tier_tokens.sum() / self.prompt_tokens.sum())

    @property
    def throughput(self) -> float:
        """Generated tokens per modelled second, from the first arrival to the last token."""
        return self.generated / self.makespan_s

    def ttft_p(self, q: float) -> float:
        return float(np.percentile(self.ttft_s, q))

    def summary(self) -> dict:
        return {"policy": self.policy, "hit_rate": self.hit_rate, "ttft_p50_s": self.ttft_p(50),
                "ttft_p99_s": self.ttft_p(99), "tokens_per_s": self.throughput}


class Cluster:
    """``num_replicas`` replicas of ``kv_slots`` slots each behind a router (see the module docstring).

    ``cpu_blocks`` > 0 gives each replica a second tier of that many blocks in CPU memory
    (:mod:`pagedlib.sim.tiers`); a token copied back costs ``copy_s_per_token`` seconds."""

    def __init__(self, num_replicas: int, kv_slots: int, *, block_size: int = 16,
                 step_time: StepTime = OPT13B_A100, max_len: int = 8192, cpu_blocks: int = 0,
                 copy_s_per_token: float = 0.0):
        positive_int("num_replicas", num_replicas, "replicas")
        positive_int("kv_slots", kv_slots, "slots")
        self.replicas = [Replica(i, kv_slots, block_size, step_time, max_len, cpu_blocks, copy_s_per_token)
                         for i in range(num_replicas)]

    def run(self, workload: ChatWorkload, policy: str | Policy, load_cost: int = LOAD_COST) -> RouterResult:
        """Serve every turn of every chat; ``policy`` is a name of :data:`POLICIES` or a function
        ``(request, replicas, count) -> replica index`` (the tests route at random with one)."""
        if isinstance(policy, str) and policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES} or a function; got {policy!r}")
        arrivals: list[tuple[float, int, int]] = [(float(t), u, 0) for u, t in enumerate(workload.start_s)]
        heapq.heapify(arrivals)
        done: list[_Request] = []
        count = 0
        while arrivals or any(r.scheduler.has_unfinished() for r in self.replicas):
            busy = [r for r in self.replicas if r.scheduler.has_unfinished()]
            next_step = min(busy, key=lambda r: (r.clock, r.index)) if busy else None
            if arrivals and (next_step is None or arrivals[0][0] <= next_step.clock):
                at, user, turn = heapq.heappop(arrivals)
                prompt = workload.prompt(user, turn)
                reply = workload.chats[user][turn].reply
                seq = SeqState(seq_id=count, request_id=count, prompt=prompt,
                               params=SamplingParams(max_new_tokens=len(reply)))
                req = _Request(count, user, turn, at, seq, reply)
                if isinstance(policy, str):
                    i = route(policy, prompt, self.replicas, count, load_cost)
                else:
                    i = policy(req, self.replicas, count)
                if not 0 <= i < len(self.replicas):
                    raise ValueError(f"the policy sent request {count} to replica {i}; there are "
                                     f"{len(self.replicas)} (0 to {len(self.replicas) - 1})")
                self.replicas[i].add(req, at)
                count += 1
                continue
            for req in next_step.step():
                done.append(req)
                if req.turn + 1 < len(workload.chats[req.user]):
                    heapq.heappush(arrivals, (req.finish_s + workload.think_s, req.user, req.turn + 1))
        done.sort(key=lambda r: r.rid)
        first = float(workload.start_s.min()) if len(done) else 0.0
        name = policy if isinstance(policy, str) else getattr(policy, "__name__", "custom")
        return RouterResult(
            policy=name, num_replicas=len(self.replicas),
            ttft_s=np.array([r.first_token_s - r.arrival_s for r in done]),
            prompt_tokens=np.array([len(r.seq.prompt) for r in done], dtype=np.int64),
            hit_tokens=np.array([r.hit_tokens for r in done], dtype=np.int64),
            tier_tokens=np.array([r.tier_tokens for r in done], dtype=np.int64),
            replica=np.array([r.replica for r in done], dtype=np.int64),
            generated=sum(len(r.reply) for r in done),
            makespan_s=max((r.finish_s for r in done), default=first) - first,
            prefill_tokens=sum(r.prefill_tokens for r in self.replicas),
            loaded_tokens=sum(r.loaded_tokens for r in self.replicas),
            busy_s=[r.busy_s for r in self.replicas])


def serve_chats(workload: ChatWorkload, policy: str | Policy, num_replicas: int = 4,
                kv_slots: int = 16_384, **kwargs) -> RouterResult:
    """Serve ``workload`` on a fresh :class:`Cluster` under ``policy``; see the module docstring."""
    load_cost = kwargs.pop("load_cost", LOAD_COST)
    return Cluster(num_replicas, kv_slots, **kwargs).run(workload, policy, load_cost)
