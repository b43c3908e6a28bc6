"""Long work a caller watches and stops (moe_model/progress.py): checkpoints do nothing unwatched."""

from __future__ import annotations

import threading

import pytest

from moe_model.progress import Watch, WorkStoppedError, checkpoint, watched_steps, watching


def test_a_checkpoint_outside_watching_does_nothing():
    checkpoint("anything", 1, 2)


def test_a_watched_checkpoint_records_the_step_and_raises_once_stopped():
    with watching(Watch()) as watch:
        assert list(watched_steps("each", ["a", "b", "c"])) == ["a", "b", "c"]
        assert (watch.step, watch.done, watch.total, watch.fraction) == ("each", 2, 3, 2 / 3)
        watch.stop.set()
        with pytest.raises(WorkStoppedError):
            checkpoint()
    checkpoint()  # the watch ended with its block


def test_a_watch_belongs_to_the_thread_that_set_it():
    stopped = Watch()
    stopped.stop.set()
    seen = []
    with watching(stopped):
        other = threading.Thread(target=lambda: seen.append(checkpoint("elsewhere")))
        other.start()
        other.join()
    assert seen == [None] and stopped.step == ""
