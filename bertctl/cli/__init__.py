"""The `bertctl` command tree. Each command only declares its inputs and calls its stage.

A stage's settings flags are derived from its pydantic settings class, so a flag and the
`--config` key of the same name are one definition: the help text, the default and the
validation cannot drift apart.
"""

from __future__ import annotations

import inspect
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from click.exceptions import NoArgsIsHelpError

import bertctl
from bertctl import console, hardware, plugins
from bertctl.errors import BertctlError
from bertctl.data import hub
from bertctl.contract import signals
from bertctl.contract.artifacts import Target
from bertctl.stages.settings import (AuditSettings, BuildPretrainDataSettings, ChooseSettings,
                                    DistillSettings, EmbedSettings, EvalSettings, ExportSettings,
                                    FinetuneSettings, GlueSummarySettings, IndexSettings,
                                    MergeSettings, MineSettings, PretrainSettings, ReportSettings,
                                    SplitSettings, TokenizeSettings)
from bertctl.cli.flags import COMMON, PanelledCommand, field_parameter
from bertctl.cli.handling import _handled, _report
from bertctl.cli.plain import PLAIN as _PLAIN
from bertctl.settings import StageConfig, resolve
from bertctl.errors import Interrupted
from bertctl.tasks.retrieval.reader import beir_root
from bertctl.stages.settings.assembled import (distill_settings, eval_settings, finetune_settings,
                                    pretrain_settings)

HELP = ("BERT pretraining and fine-tuning pipelines: each command is a stage that reads and "
        "writes versioned artifact directories.")


def _version(value: bool) -> None:
    if value:
        print(f"bertctl {bertctl.__version__}")
        raise typer.Exit()


def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False):
    pass


# (command name, the settings class or a function returning it, help, the stage function),
# in the order `bertctl --help` lists them; `make_app` turns each into a command.
_STAGES: list[tuple[str, Any, str, Any]] = []


def stage(name: str, settings: type[StageConfig] | Any, help: str):
    """Declare `fn(settings, out, force, **inputs)` as a command taking the stage's inputs, the
    common options and one flag per settings field. `settings` may be a function returning the
    class, called when the app is made (the task settings depend on the registered families)."""

    def declare(fn):
        _STAGES.append((name, settings, help, fn))
        return fn

    return declare


def _command(settings: type[StageConfig], help: str, fn):
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=hints[p.name])
           for p in inspect.signature(fn).parameters.values()
           if p.name not in ("settings", "target")]
    common = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
              for n, (a, d) in COMMON.items()]
    fields = [field_parameter(n, f) for n, f in settings.model_fields.items()]

    def command(**kwargs):
        json_mode, debug = kwargs.pop("json_output"), kwargs.pop("debug")
        out, force, wait = kwargs.pop("out"), kwargs.pop("force"), kwargs.pop("wait")
        config_file = kwargs.pop("config")
        overrides = {n: kwargs.pop(n) for n in settings.model_fields}
        console.set_quiet(False)
        with _handled(json_mode, debug):
            kwargs = {k: _local(v) for k, v in kwargs.items()}
            target = Target(out, force, wait, given=_directories(kwargs))
            resolved = resolve(settings, config_file, overrides)
            outcome = fn(settings=resolved, target=target, **kwargs)
            if outcome is not None and signals.pending():   # asked to stop as it finished
                raise Interrupted(f"interrupted as the {outcome.manifest.kind} artifact was "
                                  f"finished; it is complete: {outcome.path}")
            if outcome is not None:  # None: a non-zero rank of a distributed run
                _report(outcome, json_mode)

    command.__signature__ = inspect.Signature(own + common + fields)
    command.__doc__ = help
    command.__name__ = fn.__name__
    return command


def _local(value):
    """A path argument with each hub name (hf:ORG/NAME) made the local cache's snapshot."""
    if isinstance(value, (list, tuple)):
        return type(value)(_local(v) for v in value)
    if isinstance(value, (Path, str)) and hub.is_hub_name(value):
        return hub.resolve(str(value))
    return value


def _directories(arguments: dict) -> tuple[Path, ...]:
    """The directories among a command's path arguments (a corpus, task data, a BEIR set), and
    the BEIR set a file argument belongs to (its corpus.jsonl, a qrels file): an artifact
    written inside one would change that set's id for every later eval of it."""
    values = [v for v in arguments.values() if isinstance(v, (Path, str))]
    values += [p for v in arguments.values() if isinstance(v, (list, tuple))
               for p in v if isinstance(p, (Path, str))]
    paths = [Path(v) for v in values if v]
    return tuple([p for p in paths if p.is_dir()]
                 + [r for r in map(beir_root, paths) if r is not None])


def settings_of(name: str) -> type[StageConfig]:
    """The settings class behind a stage command, as the app made now shows it."""
    for command, settings, _, _ in _STAGES:
        if command == name:
            return settings if isinstance(settings, type) else settings()
    raise KeyError(name)


def make_app() -> typer.Typer:
    """The command tree, made from the stages declared below and the plug-ins registered now:
    bertctl's own and those of installed packages (bertctl.plugins); one registered later
    needs a new app."""
    plugins.load()
    app = typer.Typer(
        name="bertctl", help=HELP, no_args_is_help=True, add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # help texts name tokens like [MASK]; they are not markup
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name, _, help, fn in _STAGES:
        app.command(name, help=help, cls=PanelledCommand)(_command(settings_of(name), help, fn))
    for name, fn in _PLAIN:
        app.command(name)(fn)
    return app


# ---------------------------------------------------------------------------------------------
# Commands

@stage("tokenize", TokenizeSettings, help="Train a BERT WordPiece tokenizer on corpus files (or "
       "import a vocab.txt or a Hugging Face tokenizer directory) into a tokenizer artifact.")
def tokenize(settings: TokenizeSettings, target: Target,
             corpus: Annotated[Optional[list[str]], typer.Argument(
                 help="Corpus files, globs or directories: text (one sentence per line, blank "
                      "line between documents; .gz too), or .jsonl/.csv/.tsv/.parquet with "
                      "--text-column.", show_default=False)] = None,
             from_vocab: Annotated[Optional[Path], typer.Option(
                 help="Import this vocab.txt instead of training.")] = None,
             from_pretrained: Annotated[Optional[Path], typer.Option(
                 help="Import a local Hugging Face BERT tokenizer directory.")] = None,
             extend: Annotated[Optional[Path], typer.Option(
                 help="Extend this tokenizer (a tokenizer artifact, or a model's or Hugging "
                      "Face directory) with --add N words of the corpus, keeping its ids.")
             ] = None):
    from bertctl.stages import tokenize as stage_module

    return stage_module.run(settings, target, corpus or [], from_vocab=from_vocab,
                            from_pretrained=from_pretrained, extend=extend)


@stage("build-pretrain-data", BuildPretrainDataSettings, help="Build masked-LM + next-sentence "
       "instances (Google's algorithm) from a tokenizer artifact and corpus files into a "
       "pretrain-data artifact; or combine slices built separately.")
def build_pretrain_data(
        settings: BuildPretrainDataSettings, target: Target,
        tokenizer: Annotated[Optional[Path], typer.Argument(
            help="The tokenizer artifact.", show_default=False)] = None,
        corpus: Annotated[Optional[list[str]], typer.Argument(
            help="Corpus files, globs or directories, as for tokenize.",
            show_default=False)] = None,
        combine: Annotated[Optional[list[Path]], typer.Option(
            help="Combine these slice artifacts (built with --num-shards/--shard-index) into "
                 "one; repeat the flag per slice.")] = None,
        exclude: Annotated[Optional[list[Path]], typer.Option(
            help="Leave out every corpus document that shares a word n-gram with this task "
                 "file's texts (the rule of bertctl audit); repeat the flag per file. What was "
                 "left out is listed in excluded.jsonl.")] = None):
    from bertctl.stages import build_pretrain_data as stage_module

    return stage_module.run(settings, target, tokenizer, corpus or [], combine=combine,
                            exclude=exclude)


@stage("pretrain", pretrain_settings, help="Pretrain an encoder of any --architecture (--objective: MLM "
       "+ NSP, MLM, ELECTRA) on a pretrain-data artifact into a model artifact; from a size "
       "preset, a config.json or a model; under torchrun too.")
def pretrain(settings: PretrainSettings, target: Target,
             data: Annotated[Path, typer.Argument(help="The pretrain-data artifact.",
                                                   show_default=False)],
             init_from: Annotated[Optional[Path], typer.Option(
                 help="Start from this model artifact or Hugging Face BERT directory "
                      "(continued pretraining).")] = None,
             model_config: Annotated[Optional[Path], typer.Option(
                 help="Build the model from this Hugging Face config.json instead of a "
                      "preset.")] = None):
    from bertctl.stages import pretrain as stage_module

    return stage_module.run(settings, target, data, init_from=init_from,
                            model_config=model_config)


ModelArgument = Annotated[Path, typer.Argument(
    help="A model artifact or a local Hugging Face BERT directory.", show_default=False)]
RunnableModel = Annotated[Path, typer.Argument(
    help="A model artifact, a local Hugging Face BERT directory, or an export artifact (run "
         "with onnxruntime).", show_default=False)]


@stage("finetune", finetune_settings, help="Fine-tune a model artifact or Hugging Face BERT "
       "directory on a task of any registered family (single sentence or pair classification, "
       "multi-label, regression, multiple choice, span QA, tagging: see --family) into a model artifact "
       "with the task head. Runs data-parallel under torchrun.")
def finetune(settings: FinetuneSettings, target: Target,
             model: ModelArgument,
             train: Annotated[Path, typer.Argument(
                 help="The training table (TSV, CSV, JSON lines, parquet, a saved dataset "
                      "directory, or shards: a directory or a quoted pattern), or a preset "
                      "task's data directory.", show_default=False)],
             dev: Annotated[Optional[Path], typer.Option(
                 help="Validation file, evaluated after each epoch (default: the preset's dev "
                      "file when TRAIN is a directory).")] = None):
    from bertctl.stages import finetune as stage_module

    return stage_module.run(settings, target, model, train, dev_path=dev)


@stage("distill", distill_settings, help="Train a smaller student to imitate a fine-tuned "
       "teacher on task data (its soft targets at a temperature, the gold labels where the data "
       "has them, optionally its hidden states) into a model artifact of the teacher's task. "
       "The student: some of the teacher's layers (default: every second), a preset size, a "
       "config.json or a pretrained model with the teacher's vocabulary.")
def distill(settings: DistillSettings, target: Target,
            teacher: Annotated[Path, typer.Argument(
                help="The fine-tuned teacher: a model artifact or Hugging Face BERT directory "
                     "with a task head.", show_default=False)],
            train: Annotated[Path, typer.Argument(
                help="The training file, read with the teacher's task (flags may say how); "
                     "without labels (tagging: the words alone) the teacher's outputs are the only "
                     "targets.",
                show_default=False)],
            dev: Annotated[Optional[Path], typer.Option(
                help="Validation file, evaluated after each epoch (default: the preset's dev "
                     "file when TRAIN is a directory).")] = None,
            student_init: Annotated[Optional[Path], typer.Option(
                help="Start the student from this model (e.g. a small pretrained one); it must "
                     "have the teacher's tokenizer.")] = None,
            student_config: Annotated[Optional[Path], typer.Option(
                help="Build the student from this Hugging Face config.json (random "
                     "weights, the teacher's vocabulary).")] = None):
    from bertctl.stages import distill as stage_module

    return stage_module.run(settings, target, teacher, train, dev_path=dev,
                            student_init=student_init, student_config=student_config)


@stage("eval", eval_settings, help="Evaluate a model on task data (metrics and GLUE-style "
       "predictions) or, for a pretrain-data artifact, its masked-LM loss, accuracy and "
       "perplexity, into an eval artifact.")
def evaluate(settings: EvalSettings, target: Target,
             model: RunnableModel,
             data: Annotated[Path, typer.Argument(
                 help="A task data file (.tsv/.csv/.jsonl/.parquet, a save_to_disk directory, "
                      "or shards: a directory or a quoted pattern), or a pretrain-data "
                      "artifact.", show_default=False)],
             expect: Annotated[Optional[list[str]], typer.Option(
                 help="A quality gate on metrics.json, e.g. 'accuracy>=0.85' (repeatable; "
                      "dotted paths reach nested metrics). The artifact is written either way; "
                      "each unmet one is a line on stderr and the exit code is 3.")] = None,
             rerank: Annotated[Optional[Path], typer.Option(
                 help="A search's first stage reranked: this cross-encoder (bertctl finetune "
                      "--task reranking, or a sentence-transformers CrossEncoder; or, with "
                      "--rerank-scoring maxsim, an embedding model such as the first stage "
                      "itself) reorders each query's first --rerank-depth documents; its "
                      "metrics are rerank/METRIC beside the first stage's, and "
                      "rerank_fused/METRIC those of the two orders fused (reciprocal rank "
                      "fusion).")] = None):
    from bertctl.stages import eval as stage_module

    return stage_module.run(settings, target, model, data, expect or [], rerank)


@stage("embed", EmbedSettings, help="Embed texts (an embedding model's own vectors, or an "
       "encoder's hidden states per text, piece or word) into .npy shards with an index.")
def embed(settings: EmbedSettings, target: Target,
          model: RunnableModel,
          data: Annotated[Path, typer.Argument(
              help="A text file (one item per line) or a table (.tsv/.csv/.jsonl/.parquet or a "
                   "save_to_disk directory) with --text-column.", show_default=False)]):
    from bertctl.stages import embed as stage_module

    return stage_module.run(settings, target, model, data)


@stage("index", IndexSettings, help="Make an embeddings artifact searchable: exact search "
       "below --exact-below vectors, above it an approximate index (faiss IVF or HNSW, float "
       "or int8) whose recall@k against exact search is measured and recorded.")
def index(settings: IndexSettings, target: Target,
          embeddings: Annotated[Path, typer.Argument(
              help="An embeddings artifact of an embedding model's own vectors (bertctl embed "
                   "MODEL DOCS --id-column ID).", show_default=False)]):
    from bertctl.stages import index as stage_module

    return stage_module.run(settings, target, embeddings)


@stage("mine", MineSettings, help="Mine hard negatives for retrieval pairs with the model "
       "itself, guarded against false negatives, into a mined artifact (pairs.jsonl).")
def mine(settings: MineSettings, target: Target, model: RunnableModel,
         train: Annotated[Path, typer.Argument(help="The query, positive pairs (a table).")],
         corpus: Annotated[Optional[Path], typer.Option(help="More documents: a .txt (a text "
                                                        "a line) or a corpus.jsonl.")] = None,
         teacher: Annotated[Optional[Path], typer.Option(
             help="A cross-encoder (bertctl finetune --task reranking; or, with "
                  "--teacher-scoring maxsim, an embedding model) whose score of each row's "
                  "positive and negatives is written beside them (score_positive, "
                  "score_negative_1, ...): what finetune --task retrieval distils from "
                  "(listwise KL by default).")] = None):
    from bertctl.stages import mine as stage_module
    return stage_module.run(settings, target, model, train, corpus, teacher)


@stage("split", SplitSettings, help="Hold out a dev set of a retrieval training table by "
       "query (every row of a query goes one way), or check a dev set of your own against it, "
       "into a split artifact: train.jsonl, dev/ (a BEIR directory over every text of the "
       "table and --corpus) and dev-pairs.jsonl.")
def split(settings: SplitSettings, target: Target,
          train: Annotated[Path, typer.Argument(help="The query, positive pairs (a table).")],
          dev: Annotated[Optional[Path], typer.Option(
              help="A dev set of your own (a BEIR directory or one of its qrels files), "
                   "refused if it shares a query with TRAIN; unset: held out of TRAIN.")] = None,
          corpus: Annotated[Optional[Path], typer.Option(help="More documents for the held-out "
                                                         "dev set's corpus: a .txt (a text a "
                                                         "line) or a corpus.jsonl.")] = None):
    from bertctl.stages import split as stage_module
    return stage_module.run(settings, target, train, dev, corpus)


@stage("choose", ChooseSettings, help="Choose among evals of one dev set by their paired "
       "nDCG@10 (each candidate NAME=EVAL, or NAME=EVAL:rerank / :fused for its reordered "
       "run; the first the baseline), into a choice artifact (choice.json, chosen.txt): a "
       "step that does not gain on dev is not taken.")
def choose(settings: ChooseSettings, target: Target,
           candidate: Annotated[list[str], typer.Argument(
               help="NAME=EVAL[:rerank|:fused], in order; the first is the baseline.",
               show_default=False)]):
    from bertctl.stages import choose as stage_module
    return stage_module.run(settings, target, candidate)


@stage("merge", MergeSettings, help="Merge models of one architecture, shape, vocabulary "
       "and head (checkpoints of a run, branches of a decay, fine-tuned seeds) into one model "
       "artifact: their weighted average, or a greedy soup chosen on --dev.")
def merge(settings: MergeSettings, target: Target,
          model: Annotated[list[Path], typer.Argument(
              help="Model artifacts or Hugging Face directories, in order.",
              show_default=False)],
          dev: Annotated[Optional[Path], typer.Option(
              help="A labelled file of the models' task: each model and the merged one are "
                   "scored on it (the soup is chosen on it with --soup greedy).")] = None):
    from bertctl.stages import merge as stage_module
    return stage_module.run(settings, target, model, dev)


@stage("audit", AuditSettings, help="Audit a corpus for task examples: which examples of "
       "each task file share a word n-gram (13 words; shorter texts whole) with the corpus, "
       "streamed over corpora of any size, into an audit artifact listing them.")
def audit(settings: AuditSettings, target: Target,
          corpus: Annotated[list[str], typer.Argument(
              help="Corpus files, globs or directories, as for tokenize.", show_default=False)],
          against: Annotated[Optional[list[Path]], typer.Option(
              help="A task file to audit (.tsv/.csv/.jsonl/.parquet); repeat the flag per "
                   "file.", show_default=False)] = None):
    from bertctl.stages import audit as stage_module

    return stage_module.run(settings, target, corpus, against or [])


@stage("export", ExportSettings, help="Export a model's task head (or its bare encoder) to "
       "ONNX with dynamic batch and sequence axes, optionally int8-quantized, into an export "
       "artifact that eval and embed run with onnxruntime; --check DATA measures the quality "
       "it keeps and its latency. Needs the export extra: pip install 'bertctl[export]'.")
def export(settings: ExportSettings, target: Target,
           model: ModelArgument,
           check: Annotated[Optional[Path], typer.Option(
               help="Labelled task data (as eval reads it with the model's task): score the "
                    "PyTorch model and the export side by side and record the difference; a "
                    "drop beyond --max-drop exits 3 with the artifact written.")] = None):
    from bertctl.stages import export as stage_module

    return stage_module.run(settings, target, model, check=check)


@stage("report", ReportSettings, help="One self-contained HTML page (plots inline, no network "
       "needed) for one or several artifacts: training curves, metrics, confusion matrices, "
       "lineage; for several runs a side-by-side table, overlaid curves and mean +- sd over "
       "seeds. The page is a report artifact.")
def report(settings: ReportSettings, target: Target,
           artifact: Annotated[list[Path], typer.Argument(
               help="The artifacts to show (any kind).", show_default=False)]):
    from bertctl.stages import report as stage_module

    return stage_module.run(settings, target, artifact)


@stage("glue-summary", GlueSummarySettings, help="Summarise a GLUE grid of fine-tuning runs "
       "from their eval artifacts: per task the dev metric's mean +- sd over seeds at each "
       "learning rate, the dev-selected run, and the benchmark's submission zip of its test "
       "predictions. The summary is a glue-summary artifact.")
def glue_summary(settings: GlueSummarySettings, target: Target,
                 evals: Annotated[list[Path], typer.Argument(
                     help="Eval artifacts of fine-tuned GLUE models: dev files, test files and "
                          "the diagnostic set (AX) for MNLI.", show_default=False)]):
    from bertctl.stages import glue_summary as stage_module

    return stage_module.run(settings, target, evals)


app = make_app()


def main() -> None:
    # SIGTERM (a kill, a CI timeout) unwinds like Ctrl-C so temporary directories are removed.
    signals.install()
    try:
        hardware.check_torch()
    except BertctlError as exc:
        print(f"bertctl: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        code = app(prog_name="bertctl", standalone_mode=False)
    except typer.Abort:
        print("bertctl: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as exc:   # click's usage errors, as typer re-exports them
        # Bad usage is one line on stderr, as every exit-2 error; the hint to the command's
        # help follows only for a person at a terminal.
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "bertctl"
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if isinstance(exc, NoArgsIsHelpError):   # `bertctl` alone: the help, as asked
            print(message, file=sys.stderr)
            sys.exit(2)
        print(f"{where}: {' '.join(message.split())}", file=sys.stderr)
        if sys.stderr.isatty() and ctx is not None:
            print(f"Try '{where} --help' for help.", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code or 0)


if __name__ == "__main__":
    sys.exit(main())
