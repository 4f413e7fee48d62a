"""Chapter 13 exercises: the bytes a prefill engine hands to its decode engine; which replica a
prefix-aware router picks; the link speed above which a CPU tier's copy beats recomputing.

Reference solutions are plain functions or values; each name is then rebound to its Exercise, so a
notebook calls ``ex.pick_replica.check(my_function)``.
"""
from __future__ import annotations

from ..memory.capacity import MODELS, PEAK_FP16_TFLOPS, SMOLLM2_135M
from . import Above, Below, Exercise

# ---- exercise 1: the K/V a 4K-token Llama-3-8B prefill hands over ----------------------------------

PROMPT_TOKENS = 4096
_LLAMA3_8B = MODELS["llama-3-8b"]     # 32 layers, 8 K/V heads of 128, fp16


def _transfer_bytes(tokens: int = PROMPT_TOKENS) -> int:
    spec = _LLAMA3_8B
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes * tokens


transfer_bytes = Exercise(
    "ch13.transfer_bytes",
    f"A prefill engine computes a {PROMPT_TOKENS:,}-token prompt of Llama-3-8B (32 layers, 8 K/V "
    "heads of 128 elements, fp16) and hands the prompt's K/V to a decode engine. How many bytes "
    "move? An integer.",
    _transfer_bytes(),
    mistakes=[(_transfer_bytes() // 2, "Half: every token has a key AND a value vector in every layer."),
              (_transfer_bytes() * 4, "Llama-3-8B has 32 query heads but only 8 K/V heads (GQA): only "
                                      "the K/V heads are cached."),
              (Below(10**6), "Far too small: count every layer, both K and V, every token, 2 bytes "
                             "per element."),
              (Above(10**11), "Far too big: one token of Llama-3-8B holds 128 KiB of K/V.")],
    hints=["First the bytes of one token's K/V, then times the tokens.",
           "One token: 2 (K and V) x 32 layers x 8 K/V heads x 128 elements x 2 bytes.",
           f"2 * 32 * 8 * 128 * 2 * {PROMPT_TOKENS}"],
    wrong=[_transfer_bytes() // 2, _transfer_bytes() * 4, 0],
    why=f"128 KiB per token x 4,096 tokens: 512 MiB per request, "
        f"{1e3 * _transfer_bytes() / 25e9:.0f} ms over a 25 GB/s link.",
    explanation=f"128 KiB per token times 4,096 tokens is 512 MiB per request, "
                f"{1e3 * _transfer_bytes() / 25e9:.0f} ms over a 25 GB/s link, longer than many "
                "decode steps: why disaggregated engines move K/V over the fastest link they have "
                "(RDMA, NVLink).",
)


# ---- exercise 2: which replica the prefix-aware router picks ---------------------------------------


def pick_replica(cached: list[int], loads: list[int], load_cost: int) -> int:
    """The replica with the highest cached tokens - load_cost x load; on a tie the least loaded,
    then the lowest index (pagedlib.sim.router.route's "prefix_aware" rule)."""
    best = None
    for i, (c, load) in enumerate(zip(cached, loads)):
        key = (c - load_cost * load, -load, -i)
        if best is None or key > best[0]:
            best = (key, i)
    return best[1]


def _diagnose_pick(answer, expected, args):
    cached, loads, load_cost = args
    if not isinstance(answer, int) or not 0 <= answer < len(cached):
        return f"Return a replica's index, from 0 to {len(cached) - 1}."
    if answer == max(range(len(cached)), key=lambda i: (cached[i], -i)) != expected:
        return "That is the longest cached prefix alone: each waiting request costs load_cost tokens."
    if answer == min(range(len(cached)), key=lambda i: (loads[i], i)) != expected:
        return "That is the least loaded replica alone: a cached token saves one token of prefill."
    score = [c - load_cost * load for c, load in zip(cached, loads)]
    if score[answer] == score[expected]:
        return "That ties on the score; a tie goes to the least loaded replica, then the lowest index."
    return None


pick_replica = Exercise(
    "ch13.pick_replica",
    "A prefix-aware router knows, for each replica, how many leading tokens of the prompt it caches "
    "(`cached`) and how many requests it has unfinished (`loads`). Each unfinished request costs "
    "`load_cost` tokens. Return the index of the replica with the highest `cached - load_cost * load`; "
    "on a tie the least loaded, then the lowest index.",
    pick_replica,
    cases=[([0, 2048, 1024], [0, 0, 0], 256),
           ([0, 2048, 1024], [0, 9, 1], 256),          # the warm replica is too busy
           ([512, 512, 0], [3, 1, 0], 256),             # 512 - 768 < 512 - 256 = 256 > 0
           ([0, 0, 0, 0], [2, 1, 1, 3], 100),           # no cache anywhere: least loaded
           ([256, 0], [1, 0], 256),                     # a tie on the score: the less loaded
           ([4096, 4096], [2, 2], 1),                   # a full tie: the lower index
           ([1000], [50], 256)],
    diagnose=_diagnose_pick,
    hints=["Give every replica one number, the tokens it would save minus what its queue costs, and "
           "take the largest.",
           "score[i] = cached[i] - load_cost * loads[i]; break ties by the smaller load, then the "
           "smaller index: compare tuples (score, -load, -index).",
           "max(range(len(cached)), key=lambda i: (cached[i] - load_cost * loads[i], -loads[i], -i))"],
    wrong=[lambda c, l, k: max(range(len(c)), key=lambda i: (c[i], -i)),
           lambda c, l, k: min(range(len(c)), key=lambda i: (l[i], i)),
           lambda c, l, k: max(range(len(c)), key=lambda i: (c[i] - k * l[i], i))],
    explanation="A cached token is a token of prefill saved; a request ahead in line is time lost. "
                "Weighing the two in one unit keeps a warm replica from becoming a hot spot.",
)


# ---- exercise 3: the link speed above which a CPU tier's copy beats recomputing ---------------------
# The course's cost model (pagedlib.sim.tiers, whose break_even_gbs the tests compare with this):
# prefill costs 2 x parameters FLOPs per token at half the GPU's fp16 peak; a copy moves the token's
# K/V (fp16). Plain Python here, so that the site can check the answer.

EFFICIENCY = 0.5


def _recompute_s(spec=SMOLLM2_135M, gpu: str = "H100", efficiency: float = EFFICIENCY) -> float:
    return 2 * spec.num_params / (PEAK_FP16_TFLOPS[gpu] * 1e12 * efficiency)


def _break_even_gbs(spec=SMOLLM2_135M, gpu: str = "H100", kv_factor: int = 2,
                    efficiency: float = EFFICIENCY, kv_heads: int | None = None) -> float:
    kv_bytes = kv_factor * spec.num_layers * (kv_heads or spec.num_kv_heads) * spec.head_dim * 2
    return kv_bytes / _recompute_s(spec, gpu, efficiency) / 1e9


_EVEN = _break_even_gbs()
_LLAMA_EVEN = _break_even_gbs(_LLAMA3_8B)

break_even = Exercise(
    "ch13.break_even",
    "A CPU tier copies an evicted token's K/V back instead of prefilling the token again. SmolLM2-135M "
    "(134,515,008 parameters; 30 layers, 3 K/V heads of 64 elements, K/V in fp16) runs on an H100: "
    "prefilling a token costs 2 x parameters FLOPs at half the H100's 989 fp16 TFLOPS. Above what link "
    "speed, in GB/s (10^9 bytes per second, as the link reaches it), is copying the faster of the "
    "two? A number, within 1 GB/s.",
    round(_EVEN, 1),
    tolerance=1.0,
    mistakes=[(round(_break_even_gbs(kv_factor=1), 1),
               "Half: a token has a key AND a value vector in every layer."),
              (round(_break_even_gbs(efficiency=1.0), 1),
               "Twice the answer: check each factor of two. The prefill runs at half of the 989 "
               "TFLOPS, a parameter costs 2 FLOPs (a multiply and an add), and the cache holds 2 "
               "bytes per element."),
              (round(_break_even_gbs(kv_heads=SMOLLM2_135M.num_heads), 1),
               "Three times too much: 9 query heads share 3 K/V heads (GQA), and only the K/V heads "
               "are cached."),
              (round(8 * _EVEN, 1), "That is in gigabits per second: the question asks for bytes "
                                    "(GB/s); divide by 8."),
              (Above(10**6), "That is in bytes per second: the question asks for GB/s (divide by "
                             "10^9)."),
              (Below(1), "Far too small: divide the bytes per token by the seconds per token (not "
                         "the other way round), then by 10^9.")],
    hints=["Copying a token takes its K/V bytes / the link speed; recomputing it takes its FLOPs / "
           "the GPU's speed. At the break-even link speed the two times are equal.",
           "K/V bytes per token = 2 (K and V) x 30 layers x 3 K/V heads x 64 x 2 bytes; seconds "
           "to prefill a token = 2 x 134,515,008 / (0.5 x 989e12). Divide the bytes by the seconds.",
           "2 * 30 * 3 * 64 * 2 / (2 * 134_515_008 / (0.5 * 989e12)) / 1e9"],
    wrong=[0, round(_EVEN / 2, 1), round(2 * _EVEN, 1)],
    why=f"About {_EVEN:.0f} GB/s: faster than PCIe 5 x16 reaches (about 32 GB/s), so for this model "
        "an H100 recomputes faster than PCIe copies.",
    explanation=f"22.5 KiB of K/V per token against {1e6 * _recompute_s():.2f} "
                f"us of H100 prefill: about {_EVEN:.0f} GB/s. A PCIe 5 x16 link reaching half of its "
                f"64 GB/s falls short, so an H100 recomputes this small model's tokens faster than "
                f"PCIe brings them back; Llama-3-8B, with far less K/V per parameter, breaks even at "
                f"{_LLAMA_EVEN:.0f} GB/s.",
)
