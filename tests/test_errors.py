"""`hf_elmo.errors`' number checks: what every argument and field check of the package counts as an integer."""

import ast
import fractions

import numpy as np
import pytest
from utils import package_calls

from hf_elmo.errors import is_integer, is_number


@pytest.mark.parametrize(
    ("value", "integer", "number"),
    [
        (3, True, True),
        (np.int64(3), True, True),
        (np.uint8(3), True, True),
        (True, False, False),  # Python counts a bool as an int; no count is a bool
        (np.bool_(True), False, False),
        (3.0, False, True),
        (np.float32(3), False, True),
        (fractions.Fraction(1, 3), False, True),
        ("3", False, False),
        (None, False, False),
        (3 + 0j, False, False),
    ],
)
def test_an_integer_is_no_bool_and_numpy_scalars_count(value, integer, number):
    assert (is_integer(value), is_number(value)) == (integer, number)


def test_every_number_check_of_the_package_is_is_integer_or_is_number():
    """`isinstance(x, int)` takes `True` for 1: each check that did (`embed --mix` against `"n_layers": true`,
    `encode(batch_size=True)`, `decode` of a bool or a float id) took a bool for a count or an id. `isinstance` with
    `int`, `float` or `numbers` appears in the package only inside the two checks."""

    def checks_a_number(call: ast.Call) -> bool:
        if getattr(call.func, "id", None) != "isinstance" or len(call.args) != 2:
            return False
        kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
        names = {getattr(kind, "id", None) for kind in kinds} | {getattr(kind, "attr", None) for kind in kinds}
        return bool(names & {"int", "float", "Integral", "Real", "Number"})

    found = sorted(set(package_calls(checks_a_number)))
    assert found == [("hf_elmo/errors.py", "is_integer"), ("hf_elmo/errors.py", "is_number")]
