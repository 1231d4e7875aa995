"""train/sinks: one fan-out of a run's records. Every record reaches the console's display;
the figures alone reach TensorBoard and the tracker; a resumed run's TensorBoard files drop
what the interrupted run logged after its checkpoint (purge_step: the first step it logs)."""

from bertctl.train import sinks


class Board:
    opened: list = []

    def __init__(self, logdir, purge_step=None):
        self.records = []
        Board.opened.append((logdir, purge_step, self))

    def log(self, record):
        self.records.append(record)

    def close(self):
        self.closed = True


class Tracker:
    def __init__(self):
        self.records = []

    def log(self, record):
        self.records.append(record)


RECORDS = [{"split": "resume", "step": 40, "path": "ckpt"}, {"split": "plan", "steps": 60},
           {"split": "note", "text": "out of memory"},
           {"split": "train", "step": 50, "loss": 2.5},
           {"split": "validation", "step": 50, "loss": 2.4}]


def test_notes_go_to_the_console_and_figures_everywhere(monkeypatch):
    monkeypatch.setattr(sinks.tensorboard, "ScalarWriter", Board)
    Board.opened = []
    shown, tracker = [], Tracker()
    fan = sinks.Sinks(shown.append, "runs/a", tracker)
    for record in RECORDS:
        fan(record)
    fan.close()
    assert shown == RECORDS
    assert tracker.records == RECORDS[3:]
    [(logdir, purge, board)] = Board.opened
    assert (logdir, purge) == ("runs/a", 41) and board.records == RECORDS[3:] and board.closed


def test_a_fresh_run_purges_nothing_and_no_board_opens_unasked(monkeypatch):
    monkeypatch.setattr(sinks.tensorboard, "ScalarWriter", Board)
    Board.opened = []
    sinks.Sinks(lambda r: None, "runs/b")(RECORDS[3])
    assert [(d, p) for d, p, _ in Board.opened] == [("runs/b", None)]
    Board.opened = []
    quiet = sinks.Sinks(lambda r: None)
    quiet(RECORDS[3])
    quiet.close()
    assert Board.opened == []
