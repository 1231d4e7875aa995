# The best model for a time budget (#27): pretrain with the budget recipe for BUDGET of wall-clock
# time, fine-tune and evaluate a small GLUE suite from it, and put everything on one report page
# (pretraining curves against steps and time, each task's dev metric over seeds).
#
#   make -C pipelines budget CORPUS=~/corpus BUDGET=30m GLUE=~/data/glue
#   make -C pipelines -f budget.mk budget CORPUS=... BUDGET=...   (the same, without the top Makefile)
#   make -C pipelines budget CORPUS=... TOKENIZE_FLAGS="--model byte-level-bpe --cased" \
#       PRETRAIN_FLAGS="--architecture roberta"     (a RoBERTa from a byte-level BPE vocabulary)
#
# Artifacts, each the target `make` keeps up to date (a second `make` does nothing):
#   RUNS/tokenizer   bertctl tokenize CORPUS (or --from-vocab VOCAB)
#   RUNS/data        build-pretrain-data --config DATA_RECIPE (continuous text, dynamic masks)
#   RUNS/model       pretrain --config PRETRAIN_RECIPE --time-budget BUDGET
#   RUNS/glue/...    the GLUE runs and their summary (glue.mk, with MODEL=RUNS/model)
#   RUNS/report      bertctl report: the model and every dev evaluation
# Targets: budget (the report), budget-model (the pretrained model only), budget-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   CORPUS       corpus files, globs or directories, as `bertctl tokenize` takes them
#   BUDGET       pretraining wall-clock time: 90s, 30m, 2h, 1d (default 30m)
#   GLUE         the GLUE data directory (as glue.mk); unset: pretrain only, report the model
#   TASKS        GLUE tasks fine-tuned (default SST-2 MRPC STS-B, those present under GLUE)
#   SEEDS        fine-tuning seeds (default 1 2 3); LR fine-tuning learning rate (default 2e-4:
#                a budget model is small; docs/benchmarks.md measured 1e-4 to 5e-4 on SST-2, and
#                2e-4 was best at 60 minutes for both architectures, 0.02-0.04 above 1e-4 at both)
#   EPOCHS       fine-tuning epochs (default 3)
#   DATA_RECIPE, PRETRAIN_RECIPE   the recipe (default examples/configs/budget-*.yaml)
#   VOCAB        import this vocab.txt instead of training a tokenizer; VOCAB_SIZE (default 16000)
#   MODEL_SIZE   override the recipe's model size (tiny ... large)
#   TOKENIZE_FLAGS, DATA_FLAGS, PRETRAIN_FLAGS, FINETUNE_FLAGS, EVAL_FLAGS   more flags
#   RUNS         where the artifacts go (default runs/budget)
#   BERTCTL      the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT     := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL  ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
RUNS     ?= $(ROOT)/runs/budget
BUDGET   ?= 30m
GLUE     ?=
SEEDS    ?= 1 2 3
LR       ?= 2e-4
EPOCHS   ?= 3
VOCAB    ?=
VOCAB_SIZE ?= 16000
MODEL_SIZE ?=
DATA_RECIPE ?= $(ROOT)/examples/configs/budget-data.yaml
PRETRAIN_RECIPE ?= $(ROOT)/examples/configs/budget-pretrain.yaml
TOKENIZE_FLAGS ?=
DATA_FLAGS ?=
PRETRAIN_FLAGS ?=
FINETUNE_FLAGS ?=
EVAL_FLAGS ?=
include $(ROOT)/pipelines/paths.mk
$(call resolve,CORPUS GLUE VOCAB RUNS DATA_RECIPE PRETRAIN_RECIPE)
TASKS    ?= $(foreach t,SST-2 MRPC STS-B,$(if $(wildcard $(GLUE)/$(t)/train.tsv),$(t)))

ifeq ($(filter budget-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(CORPUS)),)
$(error CORPUS= is required: the corpus files or directories to pretrain on)
endif
$(call must_exist,CORPUS GLUE VOCAB)
# Checked before the first stage, not after the tokenizer and the data are built (pretrain
# checks the 365-day bound).
$(call must_be_duration,BUDGET)
endif

CORPUS_FILES := $(foreach c,$(CORPUS),$(if $(wildcard $(c)/.),$(shell find $(c) -type f),$(wildcard $(c))))
GLUE_VARS = PIPELINES_START='$(START)' GLUE=$(GLUE) MODEL=$(RUNS)/model RUNS=$(RUNS)/glue TASKS="$(TASKS)" \
            SEEDS="$(SEEDS)" LRS=$(LR) EPOCHS=$(EPOCHS) BERTCTL="$(BERTCTL)" \
            FINETUNE_FLAGS="$(FINETUNE_FLAGS)" EVAL_FLAGS="$(EVAL_FLAGS)"

.PHONY: budget budget-model budget-glue budget-clean
budget: $(RUNS)/report/artifact.json
	@$(BERTCTL) inspect $(RUNS)/report
budget-model: $(RUNS)/model/artifact.json

$(RUNS)/tokenizer/artifact.json: $(CORPUS_FILES) $(VOCAB)
	$(BERTCTL) tokenize $(CORPUS) $(if $(VOCAB),--from-vocab $(VOCAB),--vocab-size \
	    $(VOCAB_SIZE)) $(TOKENIZE_FLAGS) --out $(@D) --force

$(RUNS)/data/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES) $(DATA_RECIPE)
	$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --config $(DATA_RECIPE) $(DATA_FLAGS) \
	    --out $(@D) --force

$(RUNS)/model/artifact.json: $(RUNS)/data/artifact.json $(PRETRAIN_RECIPE)
	$(BERTCTL) pretrain $(<D) --config $(PRETRAIN_RECIPE) --time-budget $(BUDGET) \
	    $(if $(MODEL_SIZE),--model-size $(MODEL_SIZE)) $(PRETRAIN_FLAGS) --out $(@D) --force

# The GLUE runs are glue.mk's (it keeps them up to date itself), so this step always asks it.
budget-glue: $(RUNS)/model/artifact.json
	$(if $(strip $(GLUE)),$(if $(strip $(TASKS)),$(MAKE) -f $(ROOT)/pipelines/glue.mk glue-runs \
	    $(GLUE_VARS),$(error no task of SST-2 MRPC STS-B under GLUE=$(GLUE))))

# One page: the model's curves and every dev evaluation (mean +- sd over the seeds per task).
DEV_DIRS = $(shell ls -d $(RUNS)/glue/*/lr*-seed*/dev 2>/dev/null)
$(RUNS)/report/artifact.json: budget-glue
	$(BERTCTL) report $(RUNS)/model $(DEV_DIRS) --title "Pretraining for $(BUDGET)" \
	    --out $(@D) --force

budget-clean:
	rm -rf $(RUNS)
