"""A plug-in that fails at import, whatever it raises, is skipped with one line on stderr
naming it; what one prints while it loads never reaches stdout (the command's --json)."""

import sys
import types

import pytest

from bertctl import plugins


class _EntryPoint:
    def __init__(self, name, fn):
        self.name, self.value, self._fn = name, f"fake_{name}", fn
        self.dist = types.SimpleNamespace(name=f"dist-{name}", version="1.0")

    def load(self):
        return self._fn()


def _exit():
    raise SystemExit(3)


def _multi_line():
    raise RuntimeError("first line\nsecond line\n\tthird")


def _prints():
    print("hello from a plug-in")
    return None


@pytest.fixture
def fake_plugins(monkeypatch):
    found = [_EntryPoint("exits", _exit), _EntryPoint("breaks", _multi_line),
             _EntryPoint("prints", _prints)]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: found)
    monkeypatch.setattr(plugins, "_loaded", None)
    yield
    plugins._loaded = None


def test_a_plugin_raising_systemexit_or_printing_is_skipped_in_one_line(fake_plugins, capsys):
    loaded = plugins.load()
    out, err = capsys.readouterr()
    assert out == ""                                    # the prints went to stderr
    assert "hello from a plug-in" in err
    lines = [x for x in err.splitlines() if x.startswith("bertctl: plug-in")]
    assert lines == [
        "bertctl: plug-in breaks (dist-breaks 1.0: fake_breaks) not loaded: RuntimeError: "
        "first line second line third",
        "bertctl: plug-in exits (dist-exits 1.0: fake_exits) not loaded: SystemExit: 3"]
    assert loaded == {"prints": "dist-prints 1.0"}
    assert sys.stdout is not sys.stderr
