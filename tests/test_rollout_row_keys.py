"""Training rollouts' row keys: a function of (step, mode, prompt index, generation index) over the whole
generation batch, so 1 process and 2 processes give every row the same key (and, with the engine's
batch-invariant sampling, the same rollout)."""

from __future__ import annotations

from trlvr.engine.sampling import row_key
from trlvr.training.rollout import rollout_row_keys


def test_row_keys_do_not_depend_on_the_number_of_processes():
    one = rollout_row_keys(7, True, process_index=0, local_rows=16, num_generations=4)
    two = [
        k
        for p in range(2)
        for k in rollout_row_keys(7, True, process_index=p, local_rows=8, num_generations=4)
    ]
    four = [
        k
        for p in range(4)
        for k in rollout_row_keys(7, True, process_index=p, local_rows=4, num_generations=4)
    ]
    assert one == two == four
    assert len(set(one)) == 16
    assert one[5] == row_key(7, "train", 1, 1)  # row 5 = prompt 1, generation 1


def test_row_keys_differ_across_steps_and_modes():
    train = set(rollout_row_keys(3, True, 0, 8, 4))
    assert not train & set(rollout_row_keys(3, False, 0, 8, 4))
    assert not train & set(rollout_row_keys(4, True, 0, 8, 4))
