# The paper's SQuAD and CoNLL-2003 experiments (BERT, sections 4.2-4.3 and 5.3), or any preset
# task with a training and a dev file: fine-tune MODEL= at each learning rate of LRS with each
# seed of SEEDS, evaluate every run on the dev file (and the test file when there is one), then
# one report over the dev evals: training curves and, per learning rate, the dev metrics' mean
# +- sd over the seeds (`bertctl report` groups runs that differ only in seed).
#
#   make -C pipelines squad SQUAD=~/data/squad MODEL=runs/pretrain/phase2
#   make -C pipelines squad_v2 SQUAD=~/data/squad MODEL=...
#   make -C pipelines conll2003 CONLL=~/data/conll2003 MODEL=...
#   make -C pipelines -f finetune.mk TASK=squad DATA=~/data/squad MODEL=...   (the same)
#
# Every run is its own artifact directory, RUNS/lrLR-seedSEED/{model,dev,test}; a target is the
# artifact.json of what it makes, so a second `make` does nothing. Targets:
#   finetune-runs     every run's model and evals
#   finetune-summary  the report artifact RUNS/summary (needs bertctl[report])
#   finetune-clean    remove RUNS
#
# Variables (paths relative to the directory make was started from, or absolute):
#   TASK        a preset: squad, squad_v2, conll2003 (or any other with train and dev files)
#   DATA        the task's data directory (its preset file names), or give the files:
#   TRAIN, DEV, TEST   the files (default: the preset's names under DATA; TEST only if present)
#   MODEL       the model fine-tuned: a bertctl model artifact or a Hugging Face BERT directory
#   SEEDS       fine-tuning seeds (default 1 2 3)
#   LRS         learning rates (default 5e-5 3e-5 2e-5)
#   EPOCHS, BATCH   (defaults 3 and 32; the top Makefile passes the paper's per task)
#   STEPS       optimizer steps instead of EPOCHS when set
#   MAX_SEQ     tokens per window (default: the family's, 384 for SQuAD, 128 for CoNLL)
#   PRECISION   passed to finetune and eval when set
#   FINETUNE_FLAGS, EVAL_FLAGS   more flags for every finetune / eval (e.g. --document-context)
#   RUNS        where the artifacts go (default runs/TASK)
#   BERTCTL     the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
TASK    ?=
RUNS    ?= $(ROOT)/runs/$(TASK)
SEEDS   ?= 1 2 3
LRS     ?= 5e-5 3e-5 2e-5
EPOCHS  ?= 3
STEPS   ?=
BATCH   ?= 32
MAX_SEQ ?=
PRECISION ?=
FINETUNE_FLAGS ?=
EVAL_FLAGS ?=

# The presets' file names.
FILES_squad     := train-v1.1.json dev-v1.1.json
FILES_squad_v2  := train-v2.0.json dev-v2.0.json
FILES_conll2003 := train.txt valid.txt test.txt
TRAIN ?= $(DATA)/$(word 1,$(FILES_$(TASK)))
DEV   ?= $(DATA)/$(word 2,$(FILES_$(TASK)))
TEST  ?= $(wildcard $(if $(word 3,$(FILES_$(TASK))),$(DATA)/$(word 3,$(FILES_$(TASK)))))

include $(ROOT)/pipelines/paths.mk
$(call resolve,MODEL DATA RUNS)
$(call resolve,TRAIN DEV TEST)

ifeq ($(filter finetune-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(TASK)),)
$(error TASK= is required: squad, squad_v2, conll2003, ...)
endif
ifeq ($(strip $(MODEL)),)
$(error MODEL= is required: the model artifact or Hugging Face directory to fine-tune)
endif
ifeq ($(wildcard $(TRAIN)),)
$(error no training file $(TRAIN) (paths are read from $(START)): give DATA= (the task's directory) or TRAIN=)
endif
$(call must_exist,MODEL DEV)
endif

MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),\
                   $(wildcard $(MODEL)/config.json $(MODEL)/model.safetensors))
TRAIN_ARGS := --task $(TASK) $(if $(STEPS),--steps $(STEPS),--epochs $(EPOCHS)) --batch-size $(BATCH) \
              $(if $(MAX_SEQ),--max-seq-length $(MAX_SEQ)) \
              $(if $(PRECISION),--precision $(PRECISION)) $(FINETUNE_FLAGS)
EVAL_ARGS  := $(if $(PRECISION),--precision $(PRECISION)) $(EVAL_FLAGS)
SPLITS     := dev $(if $(TEST),test)
file_of     = $(if $(filter test,$(1)),$(TEST),$(DEV))
run_dir     = $(RUNS)/lr$(1)-seed$(2)

# finetune: lr, seed
define FINETUNE
$(call run_dir,$(1),$(2))/model/artifact.json: $(MODEL_DEPS) $(TRAIN) $(DEV)
	$(BERTCTL) finetune $(MODEL) $(TRAIN) --dev $(DEV) --lr $(1) --seed $(2) $(TRAIN_ARGS) \
	    --out $$(@D) --force
endef

# eval: lr, seed, split
define EVAL
$(call run_dir,$(1),$(2))/$(3)/artifact.json: $(call run_dir,$(1),$(2))/model/artifact.json $(call file_of,$(3))
	$(BERTCTL) eval $$(<D) $(call file_of,$(3)) $(EVAL_ARGS) --out $$(@D) --force
endef

EVALS :=
$(foreach l,$(LRS),$(foreach s,$(SEEDS),\
  $(eval $(call FINETUNE,$(l),$(s)))\
  $(foreach p,$(SPLITS),\
    $(eval $(call EVAL,$(l),$(s),$(p)))\
    $(eval EVALS += $(call run_dir,$(l),$(s))/$(p)/artifact.json))))
DEV_EVALS := $(filter %/dev/artifact.json,$(EVALS))

.PHONY: finetune-runs finetune-summary finetune-clean
finetune-runs: $(EVALS)

finetune-summary: $(RUNS)/summary/artifact.json

$(RUNS)/summary/artifact.json: $(EVALS)
	$(BERTCTL) report $(patsubst %/artifact.json,%,$(DEV_EVALS)) \
	    --title "$(TASK): dev evals over LRS x SEEDS" --out $(@D) --force

finetune-clean:
	rm -rf $(RUNS)
