"""The sequence tasks (sort, copy, reverse) take the input they were trained on, say it
in one sentence that their recipe says too, and refuse anything else by name; the sort
of n numbers is n numbers."""

from __future__ import annotations

import pytest

import zoo
from zoo.registry import registry

from .conftest import run_zoo


def _task(name: str = "sort", **settings):
    return registry.get("task", name).build(settings, seed=0, workdir=None)


def test_the_recipe_states_the_input_the_task_takes():
    recipe = zoo.get_train_recipe("sort")
    task = _task(**recipe.task.settings)
    assert task.takes() == "8 numbers from 1 to 10"
    assert task.takes() in recipe.description  # one fact, said in both places
    assert task.example() == "3 1 4 1 5 9 2 6"
    assert task.parse_input(task.example())  # the example is taken


@pytest.mark.parametrize(("text", "says"), [
    ("5 3 1", "'5 3 1' has 3 numbers"),
    ("5 3 1 2 4 6 7 8 9 10 2 3", "has 12 numbers"),
    ("0 3 1 2 4 6 7 8", "holds 0, outside 1 to 10"),
    ("0 3 1", "has 3 numbers and holds 0, outside 1 to 10"),
    ("1 2 3 4 5 6 7 11", "holds 11, outside 1 to 10"),
    ("one two", "is not whole numbers"),
    ("", "has 0 numbers"),
])
def test_sort_refuses_input_it_was_not_trained_on_by_name(text, says):
    with pytest.raises(zoo.RecipeError) as raised:
        _task().parse_input(text)
    message = str(raised.value)
    assert message.startswith("sort takes 8 numbers from 1 to 10, separated by spaces "
                              "(e.g. '3 1 4 1 5 9 2 6')"), message
    assert says in message, message


def test_every_number_the_task_states_is_taken():
    task = _task()
    assert task.parse_input("10 3 1 2 4 6 7 1") == [12, 5, 3, 4, 6, 8, 9, 3]  # 10 is taken
    assert task.parse_input("1,2,3,4,5,6,7,8") == [3, 4, 5, 6, 7, 8, 9, 10]
    small = _task("reverse", seq_len=3, num_values=4)
    assert small.takes() == "3 numbers from 1 to 4" and small.example() == "3 1 4"
    with pytest.raises(zoo.RecipeError, match="reverse takes 3 numbers from 1 to 4.*holds 5"):
        small.parse_input("5 1 2")


def test_the_sort_of_n_numbers_is_n_numbers():
    task = _task(seq_len=3)
    # a model that does not stop at the end token: only the first 3 numbers are its answer
    assert task.render_output([4, 5, 6, 7, 8]) == "2 3 4"
    assert task.render_output([4, 5, task.eos_id, 7]) == "2 3"


def test_zoo_translate_refuses_a_length_the_run_was_not_trained_on(tmp_path):
    from .test_training import TINY

    result = zoo.train("sort", overrides={**TINY, "train.steps": 3}, run_dir=tmp_path / "run",
                       progress=False)
    for text, says in (("5 3 1", "has 3 numbers"), ("5 3 1 2 4 6 7 8 9 10 2 3", "has 12"),
                       ("0 3 1 2 4", "holds 0, outside 1 to 10")):
        done = run_zoo("translate", str(result.run_dir), text)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "zoo: error: sort takes 5 numbers from 1 to 10"), done.stderr  # TINY: 5
        assert says in lines[0], lines[0]
    done = run_zoo("translate", str(result.run_dir), "10 3 1 4 1", "--beam", "1")
    assert done.returncode == 0, done.stderr
    numbers = done.stdout.split()
    assert len(numbers) <= 5 and all(1 <= int(n) <= 10 for n in numbers), done.stdout
