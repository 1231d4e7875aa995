# Distillation (bertctl distill): a small, fast student from a fine-tuned TEACHER, then the
# teacher and the student evaluated on the same dev file and one report comparing them (each
# one's dev metrics, parameters, model size and eval speed).
#
#   make -C pipelines distill TEACHER=runs/sst2 DATA=~/data/glue/SST-2
#   make -C pipelines distill TEACHER=... TASK=glue/sst2 TRAIN=in-domain.tsv DEV=dev.tsv
#   make -C pipelines -f distill.mk distill TEACHER=... DATA=...   (the same)
#
# Targets: distill (the report RUNS/report, needs bertctl[report]), distill-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   TEACHER     the fine-tuned teacher: a model artifact or Hugging Face directory with a head
#   DATA        a preset task's data directory (its training and dev files), or give the files:
#   TRAIN, DEV  the training file (labels optional: the teacher labels the rest) and dev file
#   TASK        a preset to read the files with (default: the teacher's own task)
#   STUDENT     how to build the student (default: every second teacher layer), e.g.
#               "--student-layers 0,2,4", "--student-size mini", "--student-init DIR"
#   EPOCHS, BATCH, LR, SEED   distillation's (defaults 3, 32, 5e-5, 0); STEPS instead of EPOCHS
#   DISTILL_FLAGS, EVAL_FLAGS   more flags (e.g. --temperature 4 --hidden-loss 1, --precision)
#   RUNS        where the artifacts go (default runs/distill)
#   BERTCTL     the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
RUNS    ?= $(ROOT)/runs/distill
TASK    ?=
STUDENT ?=
EPOCHS  ?= 3
STEPS   ?=
BATCH   ?= 32
LR      ?= 5e-5
SEED    ?= 0
DISTILL_FLAGS ?=
EVAL_FLAGS ?=
TRAIN   ?= $(DATA)
DEV     ?=

include $(ROOT)/pipelines/paths.mk
$(call resolve,TEACHER DATA TRAIN DEV RUNS)

ifeq ($(filter distill-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(TEACHER)),)
$(error TEACHER= is required: a fine-tuned model artifact or Hugging Face directory)
endif
ifeq ($(strip $(TRAIN)),)
$(error give DATA= (a preset task's directory) or TRAIN= and DEV=)
endif
$(call must_exist,TEACHER DATA TRAIN DEV)
ifeq ($(wildcard $(TEACHER)/config.json),)
$(error TEACHER=$(TEACHER) has no config.json: give a fine-tuned model artifact or Hugging Face directory)
endif
endif

# A preset's data directory stands for its dev file in eval, and for both files in distill.
EVAL_DATA := $(or $(DEV),$(DATA))
TEACHER_DEPS := $(or $(wildcard $(TEACHER)/artifact.json),\
                     $(wildcard $(TEACHER)/config.json $(TEACHER)/model.safetensors))
DATA_DEPS := $(if $(DATA),$(wildcard $(DATA)/*),$(TRAIN) $(DEV))

.PHONY: distill distill-clean
distill: $(RUNS)/report/artifact.json

$(RUNS)/student/artifact.json: $(TEACHER_DEPS) $(DATA_DEPS)
	$(BERTCTL) distill $(TEACHER) $(TRAIN) $(if $(DEV),--dev $(DEV)) $(if $(TASK),--task $(TASK)) \
	    $(STUDENT) $(if $(STEPS),--steps $(STEPS),--epochs $(EPOCHS)) --batch-size $(BATCH) --lr $(LR) --seed $(SEED) \
	    $(DISTILL_FLAGS) --out $(@D) --force

$(RUNS)/eval-teacher/artifact.json: $(TEACHER_DEPS) $(DATA_DEPS)
	$(BERTCTL) eval $(TEACHER) $(EVAL_DATA) $(EVAL_FLAGS) --out $(@D) --force

$(RUNS)/eval-student/artifact.json: $(RUNS)/student/artifact.json
	$(BERTCTL) eval $(RUNS)/student $(EVAL_DATA) $(EVAL_FLAGS) --out $(@D) --force

$(RUNS)/report/artifact.json: $(RUNS)/eval-teacher/artifact.json $(RUNS)/eval-student/artifact.json
	$(BERTCTL) report $(RUNS)/eval-teacher $(RUNS)/eval-student \
	    --title "Distillation: teacher and student on the dev file" --out $(@D) --force

distill-clean:
	rm -rf $(RUNS)
