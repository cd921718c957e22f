"""The console's index of where trajectories are, and which topics it follows."""

from __future__ import annotations

from rollstream.consumers.console.feed import Place, TrajectoryIndex, followed
from rollstream.schemas import TopicNames
from tests.schemas.samples import TRAJECTORY


def _trajectory(session: str, strategy: str):  # type: ignore[no-untyped-def]
    return TRAJECTORY.model_copy(
        update={"trajectory_id": f"{session}/{strategy}", "session_id": session}
    )


def test_a_trajectory_is_found_in_its_topics_scored_first() -> None:
    index = TrajectoryIndex()
    built = _trajectory("s", "prefix_merge")
    index.add(built, Place("p.trajectories", 0, 5))
    index.add(built, Place("p.scored", 1, 7))
    assert index.find("s/prefix_merge", None) == Place("p.scored", 1, 7, "s")
    assert index.find("s/prefix_merge", "p.trajectories") == Place("p.trajectories", 0, 5, "s")
    assert index.find("nobody", None) is None


def test_asked_for_a_replay_topic_it_finds_the_sessions_trajectory_there() -> None:
    index = TrajectoryIndex()
    index.add(_trajectory("s", "prefix_merge"), Place("p.scored", 0, 1))
    index.add(_trajectory("s", "per_call"), Place("p.trajectories.per_call", 0, 9))
    found = index.find("s/prefix_merge", "p.trajectories.per_call")
    assert found == Place("p.trajectories.per_call", 0, 9, "s")
    assert index.topics_of("s") == {
        "p.scored": "s/prefix_merge",
        "p.trajectories.per_call": "s/per_call",
    }
    assert index.find("s/prefix_merge", "p.trajectories.tree") is None


def test_the_oldest_places_are_forgotten_past_the_bound() -> None:
    index = TrajectoryIndex(max_indexed=2)
    for i in range(3):
        index.add(_trajectory(f"s{i}", "x"), Place("p.scored", 0, i))
    assert list(index.places) == ["s1/x", "s2/x"] and index.forgotten == 1
    assert set(index.by_session) == {"s1", "s2"}  # the session map is bounded with it


def test_the_console_follows_the_runs_topics_and_each_replays() -> None:
    names = TopicNames("p")
    topics = {
        "p.events",
        "p.scored",
        "p.trajectories",
        "p.trajectories.per_call",
        "p.deadletters",
        "p.control",
        "p.tasks",
        "p.schemas",
        "q.events",
    }
    assert followed(names, topics) == topics - {"p.tasks", "p.schemas", "q.events"}
