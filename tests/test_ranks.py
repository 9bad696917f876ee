"""`trlvr.ranks`: shares of a list, the store's hand-overs between ranks (threads over one HashStore
stand in for processes), a peer's failure, and each process's own GPU."""

from __future__ import annotations

import os
import threading

import pytest
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from trlvr.errors import UserError
from trlvr.ranks import PeerFailed, Ranks, pin_local_device


@given(items=st.lists(st.integers(), max_size=40), size=st.integers(1, 8))
def test_shares_are_disjoint_and_cover_the_list_in_order(items, size):
    shares = [Ranks(r, size).share(list(enumerate(items))) for r in range(size)]
    flat = sorted(x for share in shares for x in share)
    assert flat == list(enumerate(items))  # every item once
    for r, share in enumerate(shares):
        assert all(Ranks(r, size).owner(i) == r for i, _ in share)
        assert [i for i, _ in share] == sorted(i for i, _ in share)  # in the list's order


def pair_of_ranks(size=2):
    store = dist.HashStore()
    return [Ranks(r, size, r, store) for r in range(size)]


def test_rows_reach_rank_0_and_an_announcement_reaches_every_rank():
    zero, one, two = pair_of_ranks(3)
    got = {}

    def other(me):
        got[me.rank] = me.hear("start")
        me.put(f"batch/{me.rank}", [{"rank": me.rank}])

    threads = [threading.Thread(target=other, args=(r,)) for r in (one, two)]
    for t in threads:
        t.start()
    zero.announce("start", ("todo", [3, 1]))
    rows = [zero.take("batch/1"), zero.take("batch/2")]  # waits for each
    for t in threads:
        t.join(5)
    assert got == {1: ("todo", [3, 1]), 2: ("todo", [3, 1])}
    assert rows == [[{"rank": 1}], [{"rank": 2}]]
    assert zero.store.num_keys() == 0  # every key deleted once read


def test_a_peer_failure_is_raised_where_it_is_awaited_not_waited_for():
    zero, one = pair_of_ranks()
    one.fail("batch/0", "UserError: no such file")
    with pytest.raises(PeerFailed, match="another process failed .*no such file"):
        zero.take("batch/0")
    zero.fail("start", "UserError: refused", everyone=True)
    with pytest.raises(PeerFailed, match="refused"):
        one.hear("start")


def test_sessions_keep_two_evaluations_apart():
    zero, one = pair_of_ranks()
    a0, b0 = zero.session("eval"), zero.session("eval")
    a1, b1 = one.session("eval"), one.session("eval")
    a1.put("batch/0", "first")
    b1.put("batch/0", "second")
    assert b0.take("batch/0") == "second" and a0.take("batch/0") == "first"


def test_one_process_needs_no_store():
    r = Ranks.from_env({"WORLD_SIZE": "1"})
    assert (r.rank, r.size, r.store, r.writer) == (0, 1, None, True)
    assert r.session("eval") is r and r.share([1, 2, 3]) == [1, 2, 3]


@pytest.mark.parametrize(
    "visible, local, want", [(None, 1, "1"), ("4,5", 1, "5"), ("4,5", 0, "4"), ("2", 0, "2")]
)
def test_each_process_sees_its_own_gpu(visible, local, want):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    pin_local_device(Ranks(local, 2, local), env)
    assert env["CUDA_VISIBLE_DEVICES"] == want
    pin_local_device(Ranks(local, 2, local), env)  # once per process: a second call changes nothing
    assert env["CUDA_VISIBLE_DEVICES"] == want


def test_a_process_without_a_gpu_of_its_own_is_refused_and_one_process_is_left_alone():
    with pytest.raises(
        UserError, match=r"LOCAL_RANK 2\) has no GPU of its own: CUDA_VISIBLE_DEVICES=0,1 lists 2"
    ):
        pin_local_device(Ranks(2, 3, 2), {"CUDA_VISIBLE_DEVICES": "0,1"})
    env = {"CUDA_VISIBLE_DEVICES": "3,4"}
    pin_local_device(Ranks(), env)
    assert env == {"CUDA_VISIBLE_DEVICES": "3,4"}


@pytest.mark.parametrize("command", ["eval", "select"])
def test_the_cli_pins_a_launched_process_before_any_flag_asks_cuda(monkeypatch, command):
    """Review finding 13: `--device cuda:0`'s kind calls torch.cuda.is_available() while argparse runs, and
    the CUDA runtime reads CUDA_VISIBLE_DEVICES once, at its first call: pinning after parsing came too
    late (both processes of a launch then opened the same GPU). Every CUDA query must see the pinned list."""
    import torch

    from trlvr.cli.main import main

    seen = []

    def is_available():
        seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return False

    monkeypatch.setattr(torch.cuda, "is_available", is_available)
    for k, v in {
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "1",
        "CUDA_VISIBLE_DEVICES": "4,5",
        "TRLVR_DEVICE_PINNED": "0",
    }.items():
        monkeypatch.setenv(k, v)
    assert main([command, "--device", "cuda:0"]) == 2  # refused by the kind: no GPU here
    assert seen and set(seen) == {"5"}, seen
    assert os.environ["TRLVR_DEVICE_PINNED"] == "1"


def test_pinning_from_the_environment_alone(monkeypatch):
    env = {"WORLD_SIZE": "3", "RANK": "5", "LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(UserError, match=r"process 5 \(LOCAL_RANK 2\) has no GPU of its own"):
        pin_local_device(environ=env)
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}
    pin_local_device(environ=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    env = {"WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": "3,4"}
    pin_local_device(environ=env)
    assert env == {"WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": "3,4"}
