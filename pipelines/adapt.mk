# Adapting a published model to a domain (#41): continue pretraining MODEL on CORPUS with the
# adapt recipe for BUDGET (its tokenizer kept, or grown by EXTEND words), then fine-tune the
# adapted model and MODEL itself on one task with the same seeds, and one report with the two
# side by side (mean +- sd per group, the difference in standard errors).
#
#   make -C pipelines adapt MODEL=DIR CORPUS=... TASK=glue/sst2 TRAIN=DIR_OR_FILE DEV=FILE
#   make -C pipelines -f adapt.mk adapt ...        (the same, without the top Makefile)
#
# Artifacts (each the target `make` keeps up to date; a second `make` does nothing):
#   RUNS/tokenizer   tokenize --from-pretrained MODEL (or --extend MODEL --add EXTEND CORPUS)
#   RUNS/data        build-pretrain-data --config DATA_RECIPE --exclude DEV (CORPUS's documents
#                    that share text with the dev file are left out: no score on seen text)
#   RUNS/head        with HEAD_BUDGET: pretrain --init-from MODEL --train-only new (the weights
#                    MODEL lacks, e.g. a sentence-transformers model's masked-LM head, alone)
#   RUNS/model       pretrain --init-from MODEL (or RUNS/head) --config ADAPT_RECIPE --time-budget BUDGET
#   RUNS/{original,adapted}/seedS/{model,dev}   finetune and eval, per seed
#   RUNS/report      report: the original's dev evals (group 1) and the adapted's (group 2)
#
# Variables (paths relative to the directory make was started from, or absolute):
#   MODEL     the model to adapt: a bertctl model artifact or a Hugging Face BERT directory
#   CORPUS    the domain's text (files, globs or directories, as bertctl tokenize takes them)
#   TASK      the task preset (e.g. glue/sst2, conll2003) or custom task flags in FINETUNE_FLAGS
#   TRAIN     the labelled training data; DEV the dev file scored (and excluded from the corpus)
#   BUDGET    continued-pretraining time (default 20m); SEEDS fine-tuning seeds (default 1 2 3 4 5)
#   EXTEND    words added to the vocabulary before continuing (default 0: the model's own)
#   HEAD_BUDGET, HEAD_LR   train MODEL's missing head alone this long first, at this lr
#             (default off, 1e-3): for a model saved without its masked-LM head
#   LR, EPOCHS   fine-tuning learning rate (default 5e-5) and epochs (default 3)
#   DATA_RECIPE, ADAPT_RECIPE   default examples/configs/budget-data.yaml, adapt-pretrain.yaml
#   DATA_FLAGS, PRETRAIN_FLAGS, FINETUNE_FLAGS, EVAL_FLAGS   more flags
#   RUNS      where the artifacts go (default runs/adapt); BERTCTL the bertctl command

ROOT     := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL  ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
include $(ROOT)/pipelines/paths.mk
RUNS     ?= $(ROOT)/runs/adapt
BUDGET   ?= 20m
SEEDS    ?= 1 2 3 4 5
EXTEND   ?= 0
HEAD_BUDGET ?=
HEAD_LR  ?= 1e-3
LR       ?= 5e-5
EPOCHS   ?= 3
DATA_RECIPE  ?= $(ROOT)/examples/configs/budget-data.yaml
ADAPT_RECIPE ?= $(ROOT)/examples/configs/adapt-pretrain.yaml
DATA_FLAGS ?=
PRETRAIN_FLAGS ?=
FINETUNE_FLAGS ?=
EVAL_FLAGS ?=

$(call resolve,MODEL CORPUS TRAIN DEV RUNS DATA_RECIPE ADAPT_RECIPE)
ifeq ($(filter adapt-clean,$(MAKECMDGOALS)),)
$(foreach v,MODEL CORPUS TRAIN DEV,$(if $(strip $($(v))),,$(error $(v)= is required (see pipelines/adapt.mk))))
$(call must_exist,MODEL CORPUS TRAIN DEV)
$(call must_be_duration,BUDGET HEAD_BUDGET)
endif
CORPUS_FILES := $(foreach c,$(CORPUS),$(if $(wildcard $(c)/.),$(shell find $(c) -type f),$(wildcard $(c))))
MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),$(wildcard $(MODEL)/config.json $(MODEL)/*.safetensors))
TASK_ARGS := $(if $(TASK),--task $(TASK)) $(FINETUNE_FLAGS)

.PHONY: adapt adapt-model adapt-clean
adapt: $(RUNS)/report/artifact.json
	@$(BERTCTL) inspect $(RUNS)/report
adapt-model: $(RUNS)/model/artifact.json

$(RUNS)/tokenizer/artifact.json: $(MODEL_DEPS) $(if $(filter-out 0,$(EXTEND)),$(CORPUS_FILES))
	$(BERTCTL) tokenize $(if $(filter-out 0,$(EXTEND)),$(CORPUS) --extend $(MODEL) --add \
	    $(EXTEND),--from-pretrained $(MODEL)) --out $(@D) --force

$(RUNS)/data/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES) $(DATA_RECIPE) $(DEV)
	$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --config $(DATA_RECIPE) --exclude $(DEV) \
	    $(DATA_FLAGS) --out $(@D) --force

# HEAD_BUDGET: the masked-LM head MODEL was saved without, trained alone first (the encoder
# frozen), so the continued run does not start by pushing a random head's gradients into it
ifneq ($(strip $(HEAD_BUDGET)),)
START := $(RUNS)/head
START_DEPS := $(RUNS)/head/artifact.json
$(RUNS)/head/artifact.json: $(RUNS)/data/artifact.json $(ADAPT_RECIPE) $(MODEL_DEPS)
	$(BERTCTL) pretrain $(<D) --init-from $(MODEL) --config $(ADAPT_RECIPE) --train-only new \
	    --time-budget $(HEAD_BUDGET) $(PRETRAIN_FLAGS) --lr $(HEAD_LR) --out $(@D) --force
else
START := $(MODEL)
START_DEPS := $(MODEL_DEPS)
endif

$(RUNS)/model/artifact.json: $(RUNS)/data/artifact.json $(ADAPT_RECIPE) $(START_DEPS)
	$(BERTCTL) pretrain $(<D) --init-from $(START) --config $(ADAPT_RECIPE) \
	    --time-budget $(BUDGET) $(PRETRAIN_FLAGS) --out $(@D) --force

# finetune and eval: which (original, adapted), its model directory, its model's deps, seed
define RUN
$(RUNS)/$(1)/seed$(4)/model/artifact.json: $(3) $(TRAIN) $(DEV)
	$(BERTCTL) finetune $(2) $(TRAIN) $(TASK_ARGS) --lr $(LR) --epochs $(EPOCHS) --seed $(4) \
	    --out $$(@D) --force
$(RUNS)/$(1)/seed$(4)/dev/artifact.json: $(RUNS)/$(1)/seed$(4)/model/artifact.json $(DEV)
	$(BERTCTL) eval $$(<D) $(DEV) $(EVAL_FLAGS) --out $$(@D) --force
endef
$(foreach s,$(SEEDS),$(eval $(call RUN,original,$(MODEL),$(MODEL_DEPS),$(s))))
$(foreach s,$(SEEDS),$(eval $(call RUN,adapted,$(RUNS)/model,$(RUNS)/model/artifact.json,$(s))))

TITLE = $(notdir $(MODEL)) adapted to $(notdir $(firstword $(CORPUS))) for $(BUDGET), then \
        $(or $(TASK),the task)
DEVS = $(foreach w,original adapted,$(foreach s,$(SEEDS),$(RUNS)/$(w)/seed$(s)/dev))
$(RUNS)/report/artifact.json: $(addsuffix /artifact.json,$(DEVS)) $(RUNS)/model/artifact.json
	$(BERTCTL) report $(DEVS) $(RUNS)/model --title "$(TITLE)" --out $(@D) --force

adapt-clean:
	rm -rf $(RUNS)
