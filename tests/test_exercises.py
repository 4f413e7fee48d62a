"""The exercise contract, for every registered exercise of every chapter."""
import time

import pytest

from pagedlib.exercises import (CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Result, default_compare,
                                registry)

EXERCISES = registry()


def test_registry_is_not_empty_and_names_are_chapter_qualified():
    assert "ch00.num_programs" in EXERCISES
    for name, ex in EXERCISES.items():
        assert name == ex.name and name.startswith("ch") and "." in name


@pytest.fixture(params=sorted(EXERCISES), ids=str)
def exercise(request) -> Exercise:
    return EXERCISES[request.param]


def _not_attempted_function(*args):
    raise NotImplementedError


def _raising_function(*args):
    raise RuntimeError("boom")


def test_reference_is_correct(exercise):
    assert exercise.check(exercise.reference).state == CORRECT


@pytest.mark.parametrize("stub", [..., None], ids=["ellipsis", "none"])
def test_stub_is_not_attempted(exercise, stub):
    assert exercise.check(stub).state == NOT_ATTEMPTED


def test_not_implemented_function_is_not_attempted(exercise):
    if exercise.is_function:
        assert exercise.check(_not_attempted_function).state == NOT_ATTEMPTED
    else:  # a value exercise given a function: wrong type, not a crash
        assert exercise.check(_not_attempted_function).state == INCORRECT


def test_wrong_answers_are_incorrect_with_a_message(exercise):
    for wrong in exercise.wrong:
        result = exercise.check(wrong)
        assert result.state == INCORRECT, (exercise.name, wrong)
        assert result.message


def test_raising_or_odd_answers_are_incorrect_and_never_raise(exercise):
    odd = [_raising_function, "a string", object(), [1, 2, 3], -1, 1e300, float("nan"),
           lambda *a: "wrong type"]
    for answer in odd:
        result = exercise.check(answer)
        assert isinstance(result, Result)
        assert result.state == INCORRECT, (exercise.name, answer)


def test_wrong_answers_do_not_reveal_the_reference(exercise):
    if exercise.is_function:
        return
    for wrong in exercise.wrong:
        message = exercise.check(wrong).message
        assert repr(exercise.reference) not in message


def test_hints_and_solution_never_raise(exercise, capsys):
    for n in range(0, len(exercise.hints) + 2):
        exercise.hint(n)
    exercise.solution()
    out = capsys.readouterr().out
    assert "Solution" in out


def test_hints_exist(exercise):
    assert exercise.hints, f"{exercise.name} has no hints"


# ---- the contract on hand-made exercises -----------------------------------------------------

def _forever(x):
    while True:
        pass


def _forever_and_careless(x):
    while True:
        try:
            sum(range(100))
        except Exception:  # noqa: BLE001 - what a learner might write
            continue


@pytest.mark.parametrize("loop", [_forever, _forever_and_careless], ids=["plain", "catches-everything"])
def test_a_looping_function_times_out_as_incorrect(loop):
    ex = Exercise(f"test.{loop.__name__}", "square", lambda x: x * x, cases=[(2,)], wrong=[lambda x: x],
                  timeout=0.2)
    start = time.perf_counter()
    result = ex.check(loop)
    assert result.state == INCORRECT and "more than" in result.message
    assert time.perf_counter() - start < 5


def test_value_exercise_states_and_messages():
    ex = Exercise("test.value", "2 + 2", 4, wrong=[5], diagnose=lambda a, e: "too big" if a > e else None)
    assert ex.check(4).state == CORRECT
    assert ex.check(4.0).state == CORRECT
    r = ex.check(5)
    assert r.state == INCORRECT and "too big" in r.message and "4" not in r.message
    assert ex.check("4").state == INCORRECT
    assert ex.check(...).state == NOT_ATTEMPTED


def test_check_survives_a_broken_compare():
    ex = Exercise("test.broken", "x", 1, wrong=[2], compare=lambda a, e: 1 / 0)
    assert ex.check(1).state == INCORRECT


def test_result_shows_once_in_a_notebook(capsys):
    ex = Exercise("test.show", "x", 1, wrong=[2])
    result = ex.check(1)
    result._ipython_display_()  # as Jupyter would for a cell's last value
    assert capsys.readouterr().out.count("Correct") == 1


def test_default_compare():
    assert default_compare(0.1 + 0.2, 0.3)
    assert not default_compare(True, 1)
    assert default_compare([1, 2.0], (1, 2))
    assert not default_compare([1, 2], [1, 2, 3])
    assert default_compare({"a": 1}, {"a": 1.0})


def test_an_answer_that_changes_its_inputs_cannot_corrupt_the_cases():
    exercise = registry()["ch02.reserve_max_waste"]
    cases = [tuple(list(a) if isinstance(a, list) else a for a in c) for c in exercise.cases]

    def clears_its_input(lengths, max_len):
        lengths.clear()
        return 0.0

    result = exercise.check(clears_its_input)
    assert result.state == INCORRECT and "[512, 37, 1900, 128, 4]" in result.message
    assert exercise.cases == cases
    assert exercise.check(exercise.reference).state == CORRECT
