"""The admin-access-refused fault switch: a whole GPU held by one claim is refused to an admin-access claim,
and only to one (a plain claim may meet a predecessor the kubelet has not unprepared yet, as DRA allows)."""

from __future__ import annotations




def test_admin_access_is_refused_on_a_held_gpu_and_nothing_else(start_plugin, state_dir, kubelet, make_claim) -> None:
    k = kubelet(start_plugin(state_dir, faults=["admin-access-refused"]))
    held, successor, admin = make_claim(["gpu-0"]), make_claim(["gpu-0"]), make_claim(["gpu-0"], admin=True)
    response = k.prepare([held, successor, admin])
    assert response.claims[held.uid].error == ""
    assert response.claims[successor.uid].error == "", "a plain claim on a GPU not unprepared yet is no admin claim"
    assert "is already prepared for claim" in response.claims[admin.uid].error
    assert k.unprepare([held, successor]).claims[held.uid].error == ""


def test_without_the_fault_an_admin_claim_shares_the_gpu(start_plugin, state_dir, kubelet, make_claim) -> None:
    k = kubelet(start_plugin(state_dir))
    held, admin = make_claim(["gpu-0"]), make_claim(["gpu-0"], admin=True)
    response = k.prepare([held, admin])
    assert (response.claims[held.uid].error, response.claims[admin.uid].error) == ("", "")
    k.unprepare([held, admin])
