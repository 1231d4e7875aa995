"""The SIGTERM handler's rule (bertctl/signals.py): raise at once, except where raising would be
lost (a finalizer) or would cut a write in half (a deferred block); then it is kept for the
next safe point."""

import sys

import pytest

from bertctl.contract import signals


@pytest.fixture(autouse=True)
def clean():
    signals._pending = False
    yield
    signals._pending = False


def test_raised_at_once_outside_any_guard():
    with pytest.raises(KeyboardInterrupt):
        signals.terminate(15, sys._getframe())
    assert not signals.pending()


def test_kept_inside_a_finalizer_and_raised_at_the_next_safe_point():
    class Finalized:
        def __del__(self):
            signals.terminate(15, sys._getframe())

    Finalized()   # collected at once: a raise there would print "Exception ignored" and vanish
    assert signals.pending()
    with pytest.raises(KeyboardInterrupt):
        signals.raise_pending()
    assert not signals.pending()


def test_a_deferred_block_finishes_and_the_request_waits():
    done = []
    with signals.deferred():
        signals.terminate(15, sys._getframe())
        done.append("rest of the write")
        signals.raise_pending()   # not a safe point while inside the block
    assert done and signals.pending()
    with pytest.raises(KeyboardInterrupt):
        signals.raise_pending()
