"""A server that dies during the capacity search's confirmation run fails the plan with its status
and its log's last lines (selector.measure.traffic.run_capacity); the search's result stays."""

from __future__ import annotations

from selector.measure.traffic import _server_died
from selector.engines.spec import ServerDiedError
from tests.unit.test_selection_cost import confirmation, interval_capacity


class Running:
    def __init__(self, died: bool) -> None:
        self.died, self.asked = died, []

    def check_alive(self, during: str, grace_s: float = 0.0) -> None:
        self.asked.append((during, grace_s))
        if self.died:
            raise ServerDiedError(f"the server exited with status 1 during {during}; last lines of /job/server.log:\n"
                                  "CUDA error: out of memory")


def test_the_servers_log_tail_fails_the_plan_and_the_search_stays() -> None:
    capacity = interval_capacity()
    died = "3 of 470 requests failed; the first: Server disconnected"
    capacity.confirmation = confirmation(True, errors=3, note=died)
    running = Running(died=True)
    _server_died(running, {"rate": capacity})
    trial = capacity.confirmation
    assert not trial.held and capacity.capacity_rps == 3.1 and capacity.low_rps == 2.6  # the search's result stays
    assert trial.note == ("3 of 470 requests failed; the first: Server disconnected; the server exited with status 1 "
                          "during the capacity search's confirmation run; last lines of /job/server.log:\n"
                          "CUDA error: out of memory")
    assert running.asked == [("the capacity search's confirmation run", 5.0)]
    # A server still alive after the failures (timeouts, rejections): the confirmation as judged.
    capacity.confirmation = confirmation(True, errors=3, note="3 of 470 requests failed; the first: timed out")
    _server_died(Running(died=False), {"rate": capacity})
    assert capacity.confirmation.held and capacity.confirmation.note.endswith("timed out")
    # No failed request, or no confirmation: the server is not asked.
    quiet = Running(died=True)
    capacity.confirmation = confirmation(True)
    _server_died(quiet, {"rate": capacity})
    capacity.confirmation = None
    _server_died(quiet, {"concurrency": capacity})
    assert quiet.asked == [] and capacity.confirmation is None
