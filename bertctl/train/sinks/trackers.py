"""`--log-to mlflow|wandb`: a training run's records in the user's experiment tracker.

One tracker run per artifact: named by the artifact's id, the resolved settings as its
parameters, every metrics.jsonl record's numbers at their step, the final metrics and the
lineage (each input's role, kind and id) as tags. Its id is kept in the run's work directory,
so a run resumed by the same command continues the same tracker run. Both trackers are
optional extras (`pip install 'bertctl[mlflow]'`, `'bertctl[wandb]'`), imported only when asked
for; only the process that writes the artifact logs (rank 0 under torchrun).

A tracker that fails mid-run never costs the run: the failure is said once, the tracker is
dropped, and training goes on (metrics.jsonl holds every record). One that cannot be reached
before any work is refused in one line.

- `mlflow` logs where MLflow's own MLFLOW_TRACKING_URI says (a server, a `file:` store, a
  database); `mlflow:URI` names it. The experiment: MLFLOW_EXPERIMENT_NAME, else "bertctl".
- `wandb` logs to the project WANDB_PROJECT (else "bertctl"), `wandb:PROJECT` names it; W&B's
  own WANDB_MODE=offline writes the run to disk for a later `wandb sync`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bertctl import console
from bertctl.errors import BertctlError
from bertctl.train.sinks.tensorboard import scalars   # the same names --tensorboard gives

KINDS = ("mlflow", "wandb")
_STATE = "tracker.json"


def parse(spec: str) -> tuple[str, str | None]:
    """(kind, where) of `--log-to`: mlflow, mlflow:URI, wandb, wandb:PROJECT."""
    kind, _, where = spec.partition(":")
    if kind not in KINDS:
        raise BertctlError(f"--log-to {spec}: unknown tracker (one of {', '.join(KINDS)}, "
                           f"optionally :URI for mlflow, :PROJECT for wandb)")
    return kind, where or None


def require(spec: str) -> None:
    """Fail before any work when the tracker's package is missing (one line, exit 2)."""
    kind, _ = parse(spec)
    try:
        __import__(kind)
    except ImportError:
        raise BertctlError(f"--log-to {kind} needs the optional package {kind}: "
                           f"pip install 'bertctl[{kind}]'") from None


def _flat(settings: dict[str, Any]) -> dict[str, str]:
    return {k: json.dumps(v) if isinstance(v, (dict, list)) else str(v)
            for k, v in settings.items()}


class Tracker:
    """One run in a tracker; each call after a failure is a no-op (see the module's doc)."""

    def __init__(self, spec: str, work: Path, artifact_id: str, settings: dict[str, Any],
                 lineage: list[dict[str, Any]]):
        require(spec)
        self.kind, self.where = parse(spec)
        self.failed = False
        state_path = work / _STATE
        state = json.loads(state_path.read_text()) if state_path.is_file() else {}
        resumed = state.get("kind") == self.kind and state.get("where") == self.where
        run_id = state.get("run_id") if resumed else None
        tags = {f"bertctl.input.{i['role']}.{n}": f"{i['kind']}:{i['id']}"
                for n, i in enumerate(lineage)}
        tags["bertctl.artifact_id"] = artifact_id
        try:
            run_id = getattr(self, f"_start_{self.kind}")(artifact_id, run_id,
                                                          _flat(settings), tags)
        except BertctlError:
            raise
        except Exception as exc:  # noqa: BLE001 - trackers raise their own many kinds
            raise BertctlError(f"--log-to {spec}: cannot start a run: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                               ) from None
        self.run_id = run_id
        work.mkdir(parents=True, exist_ok=True)   # only once the tracker has a run
        state_path.write_text(json.dumps({"kind": self.kind, "where": self.where,
                                          "run_id": run_id}))
        if resumed:
            console.log(f"{self.kind}: continuing run {run_id}")

    # -- MLflow -------------------------------------------------------------------------------
    def _start_mlflow(self, name, run_id, params, tags):
        import mlflow

        if self.where:
            mlflow.set_tracking_uri(self.where)
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or "bertctl")
        if mlflow.active_run() is not None:
            mlflow.end_run()
        run = mlflow.start_run(run_id=run_id, run_name=None if run_id else name)
        if run_id is None:
            for start in range(0, len(params), 100):   # MLflow's limit per call
                mlflow.log_params(dict(list(params.items())[start:start + 100]))
        mlflow.set_tags(tags)
        self._mlflow = mlflow
        return run.info.run_id

    # -- Weights & Biases --------------------------------------------------------------------
    def _start_wandb(self, name, run_id, params, tags):
        import wandb

        # W&B's tags are short labels: the lineage goes into the run's config beside the
        # settings, the artifact id is its name and its one tag.
        run = wandb.init(project=self.where or os.environ.get("WANDB_PROJECT") or "bertctl",
                         name=name, id=run_id, resume="allow" if run_id else None,
                         config={**params, "bertctl_lineage": tags}, tags=[name])
        self._wandb = run
        return run.id

    # -- logging ------------------------------------------------------------------------------
    def _guard(self, what, fn):
        if self.failed:
            return
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - never let the tracker end the run
            self.failed = True
            console.log(f"warning: {self.kind} failed while {what} ({str(exc).splitlines()[0]}"
                        f"); training goes on without it (metrics.jsonl holds every record)")

    def log(self, record: dict[str, Any]) -> None:
        if record.get("split") in ("plan", "resume"):   # the loop's notes, not figures
            return
        values, step = scalars(record), int(record.get("step", 0))
        if not values:
            return
        if self.kind == "mlflow":
            self._guard("logging", lambda: self._mlflow.log_metrics(values, step=step))
        else:
            self._guard("logging", lambda: self._wandb.log(values, step=step))

    def finish(self, metrics: dict[str, Any] | None) -> None:
        final = {f"final/{k}": float(v) for k, v in (metrics or {}).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if self.kind == "mlflow":
            self._guard("finishing", lambda: (self._mlflow.log_metrics(final) if final else None,
                                              self._mlflow.end_run()))
        else:
            self._guard("finishing", lambda: (self._wandb.summary.update(final),
                                              self._wandb.finish()))

    def abandon(self) -> None:
        """The run stopped without an artifact (interrupted, failed): the tracker run ends
        unfinished, and the same command's rerun continues it."""
        if self.kind == "mlflow":
            self._guard("stopping", lambda: self._mlflow.end_run(status="KILLED"))
        else:
            self._guard("stopping", lambda: self._wandb.finish(exit_code=1))
