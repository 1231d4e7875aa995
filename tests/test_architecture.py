"""The layers and the direction of imports (docs/architecture.md): cli -> stages -> core.

The core (everything but bertctl/cli/ and bertctl/stages/) never imports the stages or the CLI,
nor typer; a stage never imports another stage (only stages/common.py, their shared helpers).
Checked on the source's import statements, lazy (function-level) imports included.
"""

import ast
from pathlib import Path

import pytest

from bertctl import tasks
from bertctl.model import ARCHITECTURES, ROLES
from bertctl.model.architectures import HEADS

PACKAGE = Path(__file__).resolve().parents[1] / "bertctl"


def _imports(path: Path, top_level: bool = False) -> set[str]:
    """The modules (and module.name) a source file imports: anywhere, or at its top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in (tree.body if top_level else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


SOURCES = sorted(PACKAGE.rglob("*.py"))


CORE = [p for p in SOURCES if p.relative_to(PACKAGE).parts[0] not in ("cli", "stages")
        and p.name != "__main__.py"]


@pytest.mark.parametrize("path", CORE, ids=_module)
def test_core_imports_neither_stages_nor_cli(path):
    bad = sorted(n for n in _imports(path)
                 if n.startswith(("bertctl.stages", "bertctl.cli", "typer")))
    assert not bad, f"{_module(path)} imports {bad}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "model").rglob("*.py")), ids=_module)
def test_the_model_core_takes_tensors_never_the_data_package(path):
    """#54: model/ imported IGNORE_INDEX from the data core; it is in bertctl/labels.py now."""
    bad = sorted(n for n in _imports(path) if n == "bertctl.data" or
                 n.startswith("bertctl.data."))
    assert not bad, f"{_module(path)} imports {bad}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "train").rglob("*.py")), ids=_module)
def test_the_training_loop_never_imports_the_model_package(path):
    """#85: the loop trains any nn.Module; what it sets on a model (checkpointing, attention)
    it reaches through the Encoder protocol's attributes, never by importing model/."""
    bad = sorted(n for n in _imports(path) if n == "bertctl.model" or
                 n.startswith("bertctl.model."))
    assert not bad, f"{_module(path)} imports {bad}"


def _stage_of(module: str) -> str:
    """The stage a module of bertctl/stages belongs to: a module, or a package of modules."""
    return ".".join(module.split(".")[:3])


SHARED = ("bertctl.stages.common", "bertctl.stages.settings")   # every stage's helpers, settings


@pytest.mark.parametrize("path", sorted((PACKAGE / "stages").rglob("*.py")), ids=_module)
def test_stages_do_not_import_each_other(path):
    """A stage imports its own modules, stages/common and stages/settings, never another
    stage; the shared rooms import no stage."""
    mine = _stage_of(_module(path))
    allowed = SHARED if mine in SHARED else (mine, *SHARED)
    bad = sorted(n for n in _imports(path) if n.startswith("bertctl.stages.")
                 and _stage_of(n) not in allowed)
    assert not bad, f"{_module(path)} imports {bad}"


def test_every_family_is_registered_and_answers_the_protocol():
    assert set(tasks.FAMILIES) >= {"single", "pair", "regression", "multiple_choice"}
    for name, family in tasks.FAMILIES.items():
        assert family.name == name
        # a role every architecture has a class for, or a head of its own (#65)
        assert family.head in ROLES or family.head in HEADS
        # Each method of the protocol implemented, not the base's NotImplementedError.
        from bertctl.tasks.base import Family

        for method in ("read", "encode", "predictions", "score", "write_predictions"):
            assert getattr(type(family), method) is not getattr(Family, method), \
                f"family {name} does not implement {method}"


def test_stages_never_branch_on_a_family_name():
    names = {f'"{n}"' for n in tasks.FAMILIES} | {f"'{n}'" for n in tasks.FAMILIES}
    for path in [*(PACKAGE / "stages").rglob("*.py"), PACKAGE / "evaluation.py",
                 PACKAGE / "train" / "loop.py"]:
        text = path.read_text(encoding="utf-8")
        found = sorted(n for n in names if n in text)
        assert not found, f"{path.name} names families {found}"


SETTINGS = PACKAGE / "stages" / "settings"


def test_the_declared_settings_know_no_task_family():
    """Each command's settings file declares its fields on the core's blocks; the families'
    options, names and presets come from the task registry (assembled.py), never the other
    way round."""
    declared = sorted(p for p in SETTINGS.glob("*.py") if p.name != "assembled.py")
    assert len(declared) >= 17, declared   # one a command, the task block and the package
    for path in declared:
        bad = sorted(n for n in _imports(path) if n.startswith("bertctl.tasks"))
        assert not bad, f"{path.name} imports {bad}"


def test_each_command_has_one_settings_file():
    """#104: a command's settings are read in one file named after it; the batch size and a
    corpus's text column are declared once (bertctl/settings.py), each command giving its
    default."""
    from bertctl.cli import app
    from bertctl.stages.settings import STAGE_SETTINGS

    files = {c.__module__.rsplit(".", 1)[1]: c for c in STAGE_SETTINGS}
    commands = {c.name.replace("-", "_") for c in app.registered_commands if c.name}
    assert set(files) <= commands, sorted(set(files) - commands)
    text = "\n".join(p.read_text(encoding="utf-8") for p in SETTINGS.glob("*.py"))
    train = (PACKAGE / "train" / "settings.py").read_text(encoding="utf-8")
    assert "    batch_size: int = Field(" not in text + train
    assert "corpus files; unset: text" not in text


def test_the_top_level_is_a_few_modules_and_rooms():
    """#85: what belongs to a room lives in it; the top level keeps the few modules every
    layer shares (errors, console, hardware, settings, ...) and the entry points."""
    modules = sorted(p.name for p in PACKAGE.glob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    assert len(modules) <= 12, modules


@pytest.mark.parametrize("path", [p for p in SOURCES if p.relative_to(PACKAGE).parts[0] in
                                  ("tasks", "objectives", "model", "train", "data")],
                         ids=_module)
def test_settings_are_assembled_in_one_place(path):
    """Every stage's settings are assembled in stages/settings/ from the declared classes and
    the registries: no plug-in or core module imports them, and no family imports the
    training loop's modules (a family does not train; #65)."""
    names = _imports(path)
    bad = sorted(n for n in names if n.startswith("bertctl.stages.settings"))
    if path.relative_to(PACKAGE).parts[0] == "tasks":
        bad += sorted(n for n in names if n.startswith("bertctl.train"))
    assert not bad, f"{_module(path)} imports {bad}"


@pytest.mark.parametrize("path", [p for p in SOURCES if p.relative_to(PACKAGE).parts[0]
                                  in ("train", "data", "model", "settings.py")], ids=_module)
def test_the_core_owns_its_settings(path):
    """The training loop's and the data builder's settings live beside them; the core never
    reaches up into the stage settings."""
    bad = sorted(n for n in _imports(path) if n.startswith("bertctl.stages"))
    assert not bad, f"{_module(path)} imports {bad}"


@pytest.mark.parametrize("path", SOURCES, ids=_module)
def test_modules_and_functions_stay_readable(path):
    """A guard against monoliths (at most 600 lines a module) and functions a reader follows
    in one sitting (at most 120 lines). The cap is not a target: a module is split where its
    concepts part, never squeezed to fit (#65: 450 lines had code squeezed)."""
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600, f"{_module(path)} has {len(text.splitlines())} lines"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 120]
    assert not long, f"{_module(path)}: {', '.join(long)}"


def test_the_loop_the_stages_and_inference_name_no_objective():
    """Pretraining objectives are plug-ins (bertctl/objectives): what is specific to one (its
    model, metrics, validation) reaches the stages and the loop through the registry."""
    from bertctl import objectives

    names = {f'"{n}"' for n in objectives.OBJECTIVES} | {f"'{n}'" for n in objectives.OBJECTIVES}
    roles = {o.head for o in objectives.OBJECTIVES.values()}
    models = {arch.head_name(role) for arch in ARCHITECTURES.values()
              for role in arch.heads if role in roles}
    # (the declared settings name --objective's default)
    stages = [p for p in (PACKAGE / "stages").rglob("*.py") if SETTINGS not in p.parents]
    for path in [*stages, PACKAGE / "evaluation.py", *(PACKAGE / "train").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        found = sorted(n for n in names | models if n in text)
        assert not found, f"{path.name} names objectives {found}"


def test_only_the_model_core_names_an_architecture():
    """Architectures are plug-ins of the model core (bertctl/model/architectures.py): the
    stages, the loop, inference, the objectives and the task families ask for a role and get
    the class of the architecture at hand; none names a model class or an architecture."""
    from bertctl import objectives

    classes = {arch.head_name(role) for arch in ARCHITECTURES.values() for role in arch.heads}
    names = {f'"{n}"' for n in ARCHITECTURES if n not in objectives.OBJECTIVES}
    for path in [*(PACKAGE / "stages").rglob("*.py"), *(PACKAGE / "train").glob("*.py"),
                 *(PACKAGE / "objectives").glob("*.py"), *(PACKAGE / "tasks").rglob("*.py"),
                 PACKAGE / "evaluation.py", PACKAGE / "distillation.py"]:
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        code = _code_only(code)
        found = sorted(n for n in classes | names if n in code)
        assert not found, f"{_module(path)} names {found}"


def _code_only(text: str) -> str:
    """The source without its docstrings (prose may name a class as an example)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant):
            body[0].value.value = ""
    return ast.unparse(tree)


def test_every_stage_settings_class_is_declared_once_for_the_id_check():
    """The id check reads which fields ids leave out from config.STAGE_SETTINGS, not from
    whatever subclasses happen to be imported: each command's class is one of them, or is
    composed from one (the families' options added) and leaves out exactly what it does."""
    from bertctl.cli import _STAGES, settings_of
    from bertctl.stages.settings import STAGE_SETTINGS
    from bertctl.settings import field_meta

    def excluded(cls):
        return {n for n, f in cls.model_fields.items() if field_meta(f).get("identity") is False}

    for name, *_ in _STAGES:
        cls = settings_of(name)
        if cls.produces is None:
            continue
        base = next((b for b in STAGE_SETTINGS if b is cls or b in cls.__bases__), None)
        assert base is not None, f"{name}: {cls.__name__} is not in config.STAGE_SETTINGS"
        assert base.produces == cls.produces and excluded(base) == excluded(cls), name


def _strings(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_distillation_and_the_families_targets_stay_theirs():
    """Distillation is bertctl/distillation.py and stages/distill.py: the loop, the data core,
    the model core and the inference path name none of its batch keys, and (the model heads
    aside, whose forward takes its targets as transformers' do) no family's target names."""
    from bertctl import distillation
    from bertctl.tasks.base import IMITATED

    keys = {distillation.TEACHER, IMITATED}
    targets = {t for f in tasks.FAMILIES.values() for t in f.targets if t != "labels"}
    assert targets, "span QA declares its targets"
    core = [*(PACKAGE / "train").rglob("*.py"), *(PACKAGE / "data").rglob("*.py"),
            *(PACKAGE / "model").rglob("*.py"), PACKAGE / "evaluation.py"]
    for path in core:
        strings = _strings(path)
        found = sorted(s for s in strings if any(k in s for k in keys))
        assert not found, f"{_module(path)} names distillation keys {found}"
        if path.parent.name != "model":
            found = sorted(strings & targets)
            assert not found, f"{_module(path)} names a family's targets {found}"
        assert "distillation" not in _imports(path) and not any(
            n.startswith("bertctl.distillation") for n in _imports(path)), _module(path)
    # fine-tuning knows nothing of it either
    for path in (PACKAGE / "stages" / "finetune.py",
                 PACKAGE / "stages" / "common" / "task_training.py"):
        text = path.read_text(encoding="utf-8")
        assert "distill" not in text.lower(), _module(path)


# Libraries a command pays for on import (torch about 2 s and 180 MB, datasets about 1 s), and
# the optional extras, which may be missing.
HEAVY = ("torch", "datasets", "pyarrow")
EXTRAS = ("onnx", "onnxruntime", "onnxscript", "matplotlib", "tensorboardX", "transformers",
          "bm25s", "faiss", "mlflow", "wandb")


def _heavy_modules() -> set[str]:
    """The bertctl modules whose top-level imports reach a HEAVY library."""
    tops = {_module(p).removesuffix(".__init__"): _imports(p, top_level=True) for p in SOURCES}
    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for mod, names in tops.items():
            if mod not in heavy and any(n.split(".")[0] in HEAVY or n in heavy for n in names):
                heavy.add(mod)
                changed = True
    return heavy


def _function_imports(path: Path):
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    yield node.lineno, [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    yield node.lineno, [node.module, *(f"{node.module}.{a.name}"
                                                       for a in node.names)]


def test_function_level_imports_only_where_they_pay():
    """The rule (docs/architecture.md): an import sits at the top of its module, unless it is an
    optional extra, or it keeps a heavy library out of a module that is light without it (so
    the commands that run no model start without torch: tests/test_import_cost.py), or it is
    the CLI's import of a stage."""
    heavy = _heavy_modules()
    bad = []
    for path in SOURCES:
        mine = _module(path).removesuffix(".__init__")
        for line, names in _function_imports(path):
            target = names[0]
            if target.split(".")[0] in EXTRAS:
                continue
            if mine.startswith("bertctl.cli") and target.startswith("bertctl.stages"):
                continue
            if mine not in heavy and any(n.split(".")[0] in HEAVY or n in heavy for n in names):
                continue
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} {target}")
    assert not bad, "move to the top of the module:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_every_registered_architecture_fulfils_the_contract(name):
    """#54: what an architecture provides is written as Protocols (model/architectures.py);
    each registered one is checked against them, its heads are Composed models of the
    roles they claim, and its package imports only the shared module, never another
    architecture's files but those of the one it declares it builds on (RoBERTa on BERT's)."""
    import torch

    from bertctl.model import architectures, build
    from bertctl.model.composed import Composed

    from bertctl.model.shared import ACTIVATIONS

    assert set(ACTIVATIONS) == set(architectures.ACTIVATION_NAMES)
    arch = ARCHITECTURES[name]
    config = arch.config_class.from_preset("tiny", vocab_size=64)
    assert isinstance(config, architectures.ArchitectureConfig) and config.architecture == name
    assert set(arch.config_class.presets) >= {"tiny", "base"}
    assert config.with_layers([0]).num_hidden_layers == 1
    assert arch.config_from_hf(config.to_hf_dict(), "c").to_hf_dict() == config.to_hf_dict()
    assert set(arch.heads) <= set(ROLES) and "encoder" in arch.heads
    encoder = build("encoder", config)
    assert isinstance(encoder, architectures.Encoder) and not encoder.gradient_checkpointing
    out = encoder(torch.tensor([[1, 5, 6, 2]]))
    assert out["last_hidden_state"].shape == (1, 4, config.hidden_size)
    for role in arch.heads:
        cls = arch.head(role)
        assert cls.__name__ == arch.head_name(role)
        assert role == "encoder" or issubclass(cls, Composed), (role, cls)
    assert architectures.of_model(encoder) is arch
    def room(a):   # the package its config class is declared in (xlm-roberta: roberta's)
        return a.config_class.__module__.split(".")[2]

    package = PACKAGE / "model" / room(arch)
    assert arch.builds_on is None or arch.builds_on in ARCHITECTURES
    allowed = {room(arch), *(room(ARCHITECTURES[arch.builds_on]) for _ in [1] if arch.builds_on)}
    others = {f"bertctl.model.{room(a)}" for a in ARCHITECTURES.values()} - \
        {f"bertctl.model.{r}" for r in allowed}
    assert package.is_dir(), f"{name} has no package"
    for path in package.rglob("*.py"):
        bad = sorted(n for n in _imports(path) if n.startswith(tuple(others)))
        assert not bad, f"{_module(path)} imports {bad}"


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_architectures_model_flops_are_the_matmuls_its_forward_runs(name):
    """#86: MFU divides `matmul_flops`, the architecture's own count. PyTorch's FlopCounterMode
    counts the multiply-adds a forward runs (with its own formula for the CPU's fused attention,
    which it leaves unregistered), so the two agree exactly: 2 rows of 32 tokens, the masked-LM
    head at every 8th position, and BERT's pretraining model with its pooler and NSP head."""
    import dataclasses

    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    from bertctl.model import build

    config = ARCHITECTURES[name].config_class.from_preset("tiny", vocab_size=64)
    rows, seq = 2, 32
    ids = torch.randint(5, 64, (rows, seq), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    labels[:, ::8] = ids[:, ::8]
    fused = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
             lambda q, k, v, *_, out_shape=None, **__: sdpa_flop_count(q, k, v)}   # shapes

    def counted(model, **heads) -> int:
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=fused) as counter:
            model.eval()(ids, None, torch.ones_like(ids), labels, **heads)
        return counter.get_total_flops()

    torch.manual_seed(0)
    # ELECTRA's and DeBERTa's embeddings may be narrower than the hidden size.
    narrow = ([dataclasses.replace(config, embedding_size=config.hidden_size // 2)]
              if hasattr(config, "embedding_size") else [])
    for each in [config, *narrow]:
        assert counted(build("masked_lm", each)) == each.matmul_flops(rows, seq, 1 / 8,
                                                                      training=False)
    assert config.matmul_flops(rows, seq, 1 / 8) == 3 * config.matmul_flops(
        rows, seq, 1 / 8, training=False)   # backward: twice the forward, by convention
    if "pretraining" in ARCHITECTURES[name].heads:
        assert counted(build("pretraining", config), next_sentence_label=torch.zeros(
            rows, dtype=torch.long)) == config.matmul_flops(rows, seq, 1 / 8, training=False,
                                                            pooler=True)


def test_every_architecture_package_has_one_shape():
    """One layout for every architecture: `config.py` holds its config, `modeling.py` its
    encoder and the heads of the roles transformers has classes for, `__init__.py` its
    `register` call. An objective's own model (ELECTRA's generator and discriminator) may
    live in a module of its own beside them."""
    shipped = {name: arch for name, arch in ARCHITECTURES.items()
               if arch.config_class.__module__.startswith("bertctl.model.")}
    for name, arch in shipped.items():
        package = arch.config_class.__module__.rsplit(".", 1)[0]
        folder = PACKAGE / "model" / package.rsplit(".", 1)[1]
        assert {"__init__.py", "config.py", "modeling.py"} <= {
            p.name for p in folder.glob("*.py")}, folder
        assert arch.config_class.__module__ == f"{package}.config", name
        for role, where in arch.heads.items():
            module = where.split(":")[0] if isinstance(where, str) else where.__module__
            if role != "electra":
                assert module.endswith(".modeling"), (name, role, module)


def test_declaring_the_architectures_imports_no_torch():
    """`bertctl pretrain --help` lists the architectures and their sizes from the registry:
    the declarations import no model code (their classes are "module:Class" until built)."""
    import subprocess
    import sys

    code = ("import sys, bertctl.model as m; print(sorted(m.ARCHITECTURES), "
            "'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split()[-1] == "False", done.stdout


@pytest.mark.parametrize("path", sorted((PACKAGE / "search").rglob("*.py")), ids=_module)
def test_search_is_below_the_families(path):
    """#85: exact and approximate search, BM25 and late interaction serve the retrieval and
    reranking families and the search stages; they import neither."""
    bad = sorted(n for n in _imports(path) if n.startswith(("bertctl.tasks", "bertctl.stages")))
    assert not bad, f"{_module(path)} imports {bad}"


def test_the_loop_never_rewrites_its_settings():
    """#85: what a run decides (the batch fitted to a budget, the micro-batch to memory) is a
    plan the loop reads (train/plan.py); the settings stay what the user gave."""
    for path in (PACKAGE / "train").rglob("*.py"):
        assert "model_copy(" not in path.read_text(encoding="utf-8"), path.name


def test_stages_take_their_settings_as_settings():
    """#85: "config" meant four things; a stage's settings are `settings` from the CLI to the
    stage (config.json and a model's config keep the word)."""
    for path in sorted((PACKAGE / "stages").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for arg in node.args.args:
                    hint = ast.unparse(arg.annotation) if arg.annotation else ""
                    if hint.endswith("Settings"):
                        assert arg.arg == "settings", f"{_module(path)}.{node.name}({arg.arg})"
