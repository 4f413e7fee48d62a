"""pagedlib.validation: one check for every count argument, bool refused."""
import numpy as np
import pytest

from pagedlib.validation import positive_int


def test_integers_pass_through_as_int():
    assert positive_int("n", 3) == 3 and type(positive_int("n", np.int64(4))) is int


@pytest.mark.parametrize("value", [0, -2, True, False, 2.0, "3", None])
def test_everything_else_is_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match=rf"max_num_seqs must be a positive integer; got {value!r}"):
        positive_int("max_num_seqs", value)


def test_a_unit_joins_the_message():
    with pytest.raises(ValueError, match="kv_slots must be a positive integer number of slots; got 0"):
        positive_int("kv_slots", 0, "slots")
