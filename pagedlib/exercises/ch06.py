"""Chapter 6 exercises: fork and copy-on-write on a tiny pool, and a prediction of blocks and copies.

``fork_and_copy_on_write`` is checked by *replaying scripts*: each case is a list of operations
(``allocate``, ``fork``, ``append``, ``free``) run on the learner's pool class and on the reference
pool, while a shadow K/V store records every token at the slot the block table gives it and applies
the copies ``append`` returns. Block ids are never compared, so any free-list order is accepted; what
is compared is what matters: every live sequence reads back its own tokens, the ref counts match the
tables, and no more blocks are in use, and no more copies made, than sharing needs. A fork that makes
the child's table the *same list* as the parent's (an alias, not a copy) is caught by name.
"""
from __future__ import annotations

import inspect
import textwrap
from collections import deque
from itertools import count

from . import (CORRECT, INCORRECT, NOT_ATTEMPTED, Above, Below, Exercise, Item, LengthNot, Timeout,
               _call_with_timeout, _show, _Text)
from ..validation import cdiv

# ---- exercise 1: fork + copy-on-write ------------------------------------------------------------


class SharingPool:
    """The reference: a tiny block manager with ref counts, fork and copy-on-write.

    The same state as the notebook's ``TinyPool``: a deque of free block ids, a ref count per block,
    a block table and a token count per sequence.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.free_blocks = deque(range(num_blocks))  # free block ids, handed out from the left
        self.ref = [0] * num_blocks                  # ref[b]: how many block tables hold block b
        self.tables: dict = {}                       # seq -> [physical block of each logical block]
        self.lens: dict = {}                         # seq -> tokens it holds

    def new_block(self) -> int:
        if not self.free_blocks:
            raise RuntimeError("out of blocks: free a sequence or build the pool with more blocks")
        block = self.free_blocks.popleft()
        self.ref[block] = 1
        return block

    def release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free_blocks.append(block)

    def allocate(self, seq, num_tokens: int) -> None:
        n_blocks = cdiv(num_tokens, self.block_size)
        self.tables[seq] = [self.new_block() for _ in range(n_blocks)]
        self.lens[seq] = num_tokens

    def free(self, seq) -> None:
        for block in reversed(self.tables.pop(seq)):
            self.release(block)
        del self.lens[seq]

    def fork(self, parent, child) -> None:
        """`child` starts as a copy of `parent` that shares all its blocks."""
        self.tables[child] = list(self.tables[parent])   # a new table, the same blocks
        self.lens[child] = self.lens[parent]
        for block in self.tables[child]:
            self.ref[block] += 1

    def append(self, seq) -> list[tuple[int, int]]:
        """Room for one more token of `seq`; return the copies [(src, dst)] to make before writing."""
        table, n = self.tables[seq], self.lens[seq]
        copies = []
        if n % self.block_size == 0:          # the last block is full (or there is none): grow
            table.append(self.new_block())
        elif self.ref[table[-1]] > 1:         # shared and partly filled: copy on write
            src, dst = table[-1], self.new_block()
            self.release(src)                 # still held by the others, so it stays in use
            table[-1] = dst
            copies.append((src, dst))
        self.lens[seq] = n + 1
        return copies


class _NoCopyPool(SharingPool):
    """Wrong: forks share, but a write into a shared block goes into the shared block."""

    def append(self, seq):
        if self.lens[seq] % self.block_size == 0:
            self.tables[seq].append(self.new_block())
        self.lens[seq] += 1
        return []


class _CopyAlwaysPool(SharingPool):
    """Wrong: copies the last block on every write, shared or not, full or not."""

    def append(self, seq):
        table, n = self.tables[seq], self.lens[seq]
        if n % self.block_size == 0:
            table.append(self.new_block())
            self.lens[seq] = n + 1
            return []
        src, dst = table[-1], self.new_block()
        self.release(src)
        table[-1] = dst
        self.lens[seq] = n + 1
        return [(src, dst)]


class _ForgetsRefCountsPool(SharingPool):
    """Wrong: fork shares the blocks but does not count the new references."""

    def fork(self, parent, child):
        self.tables[child] = list(self.tables[parent])
        self.lens[child] = self.lens[parent]


class _AliasingPool(SharingPool):
    """Wrong: the child's table is the parent's list itself, so a later append changes both."""

    def fork(self, parent, child):
        self.tables[child] = self.tables[parent]
        self.lens[child] = self.lens[parent]
        for block in self.tables[child]:
            self.ref[block] += 1


def replay(pool_class, num_blocks: int, block_size: int, script) -> dict:
    """Run ``script`` on ``pool_class(num_blocks, block_size)`` with a shadow K/V store; return the outcome.

    Every token a sequence writes is a new number stored at the slot its block table gives; the
    copies ``append`` returns are applied first. The outcome counts the live sequences that read back
    exactly their own tokens, the blocks in use, the copies made, whether every ref count equals
    the number of tables holding the block (at the end, and right after every fork), and whether a
    fork left two sequences sharing one list object as their table (an alias).
    """
    pool = pool_class(num_blocks, block_size)
    kv: dict[int, list] = {}        # block -> the token stored in each of its slots
    written: dict = {}              # seq -> the tokens it wrote, in order
    fresh = count(100)
    copies = 0
    aliased = False
    fork_counted = True             # every fork left each ref count equal to the tables holding it

    def write(seq, position, token):
        block = pool.tables[seq][position // block_size]
        kv.setdefault(block, [None] * block_size)[position % block_size] = token

    for op, *args in script:
        if op == "allocate":
            seq, num_tokens = args
            pool.allocate(seq, num_tokens)
            written[seq] = [next(fresh) for _ in range(num_tokens)]
            for position, token in enumerate(written[seq]):
                write(seq, position, token)
        elif op == "fork":
            parent, child = args
            pool.fork(parent, child)
            aliased = aliased or pool.tables.get(child) is pool.tables.get(parent)
            fork_counted = fork_counted and _ref_counts_match(pool)
            written[child] = list(written[parent])
        elif op == "append":
            (seq,) = args
            made = pool.append(seq)
            for src, dst in made or []:
                kv[dst] = list(kv.get(src, [None] * block_size))
                copies += 1
            token = next(fresh)
            write(seq, len(written[seq]), token)
            written[seq].append(token)
        elif op == "free":
            (seq,) = args
            pool.free(seq)
            del written[seq]
    return {
        "sequences": len(written),
        "read back their own tokens": sum(_reads(pool, kv, seq, block_size) == tokens
                                          for seq, tokens in written.items()),
        "blocks in use": sum(1 for r in pool.ref if r > 0),
        "copies": copies,
        "ref counts match tables": _ref_counts_match(pool),
        "ref counts match after every fork": fork_counted,
        "aliased tables": aliased,
    }


def _reads(pool, kv, seq, block_size) -> list:
    table = pool.tables.get(seq, [])
    out = []
    for position in range(pool.lens.get(seq, 0)):
        i = position // block_size
        block = table[i] if i < len(table) else None
        out.append(kv.get(block, [None] * block_size)[position % block_size])
    return out


def _ref_counts_match(pool) -> bool:
    holders = [0] * len(pool.ref)
    for table in pool.tables.values():
        for block in table:
            holders[block] += 1
    return holders == list(pool.ref)


def _describe(script) -> str:
    return "; ".join(f"{op}({', '.join(repr(a) for a in args)})" for op, *args in script)


ALIAS_MESSAGE = ("fork made the child's table the same list as the parent's "
                 "(`tables[child] = tables[parent]`), so a later append changes both: give the child "
                 "its own copy, `list(self.tables[parent])`.")


FORK_REFS_MESSAGE = ("fork did not count the new references: after it, every block the child shares "
                     "is held by one more table, so its ref count must go up by one. Without that, "
                     "append sees a ref count of 1 and writes into a block the parent still reads.")


def _diagnose_pool(got: dict, expected: dict) -> str:
    if got["aliased tables"]:
        return ALIAS_MESSAGE
    if not got["ref counts match after every fork"]:
        return FORK_REFS_MESSAGE
    if got["read back their own tokens"] != got["sequences"]:
        return ("a sequence no longer reads back its own tokens: a token was written into a block that "
                "another sequence still uses (is a shared, partly filled block copied before the write, "
                "and is the copy returned?), or the token count was not updated.")
    if not got["ref counts match tables"]:
        return ("the ref counts do not match the block tables: fork adds one reference to every block "
                "it shares, and a copy drops one reference from the block it leaves.")
    if got["blocks in use"] > expected["blocks in use"] or got["copies"] > expected["copies"]:
        return (f"{got['blocks in use']} blocks in use and {got['copies']} copies, more than sharing "
                "needs: full blocks stay shared, and a block is copied only when it is shared and "
                "partly filled.")
    if got["copies"] < expected["copies"]:
        return ("a write into a shared, partly filled block was not moved to a copy: the other "
                "sequences' next tokens would land in the same slots.")
    return f"{got} differs from the reference outcome; compare your fork and append with the chapter."


POOL_CASES = [
    (16, 4, [("allocate", "a", 6), ("fork", "a", "b"), ("append", "b"), ("append", "a")]),
    (16, 4, [("allocate", "a", 8), ("fork", "a", "b"), ("append", "a"), ("append", "b")]),
    (16, 4, [("allocate", "a", 5), ("fork", "a", "b"), ("fork", "a", "c"),
             ("append", "a"), ("append", "b"), ("append", "c")]),
    (16, 4, [("allocate", "a", 6), ("fork", "a", "b"), ("free", "a"), ("append", "b")]),
    (16, 4, [("allocate", "a", 3), ("fork", "a", "b"), ("append", "a"), ("append", "a"),
             ("append", "b"), ("append", "b"), ("append", "b"), ("free", "b"), ("append", "a")]),
    (24, 4, [("allocate", "p", 7), ("fork", "p", "x"), ("fork", "p", "y"), ("free", "p"),
             ("append", "x"), ("append", "y"), ("fork", "x", "z"), ("append", "z"), ("append", "x"),
             ("free", "y"), ("append", "z"), ("append", "z")]),
]


class PoolExercise(Exercise):
    """An exercise whose answer is a pool class, checked by replaying scripts (see :func:`replay`)."""

    def _judge_function(self, answer) -> tuple[str, str]:
        if not callable(answer):
            return INCORRECT, f"expected your pool class, got a {type(answer).__name__}."
        for num_blocks, block_size, script in self.cases:
            expected = replay(self.reference, num_blocks, block_size, script)
            where = f"after `{_describe(script)}` (block_size={block_size})"
            try:
                got = _call_with_timeout(replay, (answer, num_blocks, block_size, script), self.timeout)
            except NotImplementedError:
                return NOT_ATTEMPTED, "fork or append still raises NotImplementedError: fill them in."
            except Timeout:
                return INCORRECT, f"the script ran for more than {self.timeout:g} s {where}."
            except Exception as exc:  # noqa: BLE001 - reported to the learner
                return INCORRECT, f"your pool raised {type(exc).__name__}: {exc} {where}."
            if got["aliased tables"]:
                return INCORRECT, ALIAS_MESSAGE
            if got != expected:
                return INCORRECT, f"{where}: {_diagnose_pool(got, expected)}"
        return CORRECT, ""

    def solution_code(self) -> str:
        """The two methods of the pool class."""
        return "\n".join(textwrap.dedent(inspect.getsource(m))
                         for m in (self.reference.fork, self.reference.append)).rstrip("\n")

    def solution(self) -> None:
        body = self.solution_code() + "\n"
        _show(_Text(f"Solution to {self.name} (the two methods of your pool class):\n{body}\n"
                    f"{self.explanation}"))


fork_and_copy_on_write = PoolExercise(
    "ch06.fork_and_copy_on_write",
    "Add `fork(parent, child)` and `append(seq) -> copies` to the tiny pool.",
    SharingPool,
    cases=POOL_CASES,
    hints=["fork gives the child a new table holding the same block ids, and the same token count; "
           "every one of those blocks is now held by one more table.",
           "append has three cases: the last block is full (take a new block), the last block is "
           "shared and partly filled (copy on write), or neither (write in place).",
           "Copy on write: take a new block `dst`, release the old one `src` (others still hold it), "
           "put `dst` in the table, and return `[(src, dst)]`. Remember to count the new token."],
    wrong=[_NoCopyPool, _CopyAlwaysPool, _ForgetsRefCountsPool, _AliasingPool],
    explanation="A full block never changes again, so it stays shared; only the partly filled last "
                "block of a sequence can be written, and it is copied only while someone else holds it.",
)



# ---- exercise 2: predict the blocks and copies of a script ----------------------------------------

PREDICT_BLOCK_SIZE = 4
PREDICT_SCRIPT = [("allocate", "a", 6), ("fork", "a", "b"), ("fork", "a", "c"),
                  ("append", "b"), ("append", "c"), ("append", "a"), ("append", "a"),
                  ("fork", "a", "d"), ("append", "d"), ("append", "a")]


def _predicted() -> tuple[int, int]:
    outcome = replay(SharingPool, 32, PREDICT_BLOCK_SIZE, PREDICT_SCRIPT)
    return outcome["blocks in use"], outcome["copies"]


_APPENDS = sum(op == "append" for op, *_ in PREDICT_SCRIPT)
_PREDICT_MISTAKES = [
    (LengthNot(2), "give a pair: (blocks in use, copies made)."),
    (Item(1, _APPENDS), "Not every append copies: only a write into a shared, partly filled block does."),
    (Item(1, Above(_predicted()[1])), "Too many copies: the last holder of a block writes in place, and "
                                      "a full block is never copied (a new block is simply added)."),
    (Item(1, Below(_predicted()[1])), "Too few copies: each sequence that writes into a block others "
                                      "still hold needs one."),
    (Item(1, _predicted()[1]), "The copies are right, the blocks are not: count every block some "
                               "table holds, once, however many tables hold it."),
]

predict_blocks_and_copies = Exercise(
    "ch06.predict_blocks_and_copies",
    "Block size 4. Run in your head: allocate a with 6 tokens; fork a into b; fork a into c; append "
    "one token to b, one to c, two to a; fork a into d; append one token to d, then one to a. How "
    "many blocks are in use at the end, and how many copy-on-write copies were made? Answer "
    "`(blocks, copies)`.",
    _predicted(),
    mistakes=_PREDICT_MISTAKES,
    hints=["Only the partly filled last block of a sequence can be written; it needs a copy while "
           "another table still holds it, and no copy once the writer is its only holder.",
           "Track the ref count of a's second block (tokens 4-7) through the script; then ask what "
           "a fork shares when the parent's last block is full, and what the next append needs.",
           "After the forks the second block is held 3 times; b and c each copy it; a, its last "
           "holder, fills it in place. d and a then share only full blocks: each one's next token "
           "starts a new block."],
    wrong=[(6, 3), (7, 2), (5, 2), (6, 6)],
    explanation="b and c each copy a's shared, half-full block (2 copies); a, its last holder, fills it "
                "in place; d's and a's next tokens each start a new block (no copy): 6 blocks.",
)

